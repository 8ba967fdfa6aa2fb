/*
 * rwconcern.c: getDefaultRWConcern / setDefaultRWConcern, the cluster-wide
 * default read and write concerns.  As mongod, the defaults are one
 * document {_id: "ReadWriteConcernDefaults", defaultReadConcern,
 * defaultWriteConcern, updateOpTime, updateWallClockTime} in config.settings,
 * written on the primary (so the oplog carries it to every member) and read
 * back through a cache refreshed every second.  A write from a client that
 * names no writeConcern takes defaultWriteConcern when one is set.  Also
 * the parser of a command's writeConcern field (sbl_cmd_parse_write_concern).
 *
 * What must stay true: the stored document is the only source; without one
 * the implicit defaults apply and are reported: read concern local, and
 * mongod's implicit write concern ({w: "majority"}, or {w: 1} for a set
 * whose arbiters make a majority unreachable with one data member down).
 */
#include "cmd/cmd_int.h"
#include "common/clock.h"
#include "repl/repl.h"

#include <pthread.h>
#include <string.h>

#define DEFAULTS_ID "ReadWriteConcernDefaults"
#define REFRESH_MS 1000

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bson_t *cached;     /* the stored document, or NULL */
static int64_t loaded_ms;  /* when cached was read; 0: never */

/* Read the stored document (under lock) when the cache is older than REFRESH_MS. */
static void refresh_locked(bool force)
{
    int64_t now = sbl_now_ms();
    if (!force && loaded_ms != 0 && now - loaded_ms < REFRESH_MS)
        return;
    bson_t cmd = BSON_INITIALIZER, f, reply = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&cmd, "find", "settings");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &f);
    BSON_APPEND_UTF8(&f, "_id", DEFAULTS_ID);
    bson_append_document_end(&cmd, &f);
    BSON_APPEND_INT32(&cmd, "limit", 1);
    sbl_cmd_run("config", &cmd, &reply);
    bson_iter_t it, d;
    if (cached != NULL)
        bson_destroy(cached);
    cached = NULL;
    if (bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.firstBatch.0", &d) &&
        BSON_ITER_HOLDS_DOCUMENT(&d)) {
        const uint8_t *data;
        uint32_t len;
        bson_iter_document(&d, &len, &data);
        cached = bson_new_from_data(data, len);
    }
    loaded_ms = now;
    bson_destroy(&reply);
    bson_destroy(&cmd);
}

/* field of the stored defaults into out (a document), false when unset. */
static bool stored_field(const char *field, bson_t *out)
{
    bool found = false;
    pthread_mutex_lock(&lock);
    refresh_locked(false);
    bson_iter_t it;
    if (cached != NULL && bson_iter_init_find(&it, cached, field) && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        const uint8_t *data;
        uint32_t len;
        bson_iter_document(&it, &len, &data);
        found = bson_init_static(out, data, len);
        if (found) {
            bson_t *copy = bson_copy(out);
            bson_copy_to(copy, out);
            bson_destroy(copy);
        }
    }
    pthread_mutex_unlock(&lock);
    return found;
}

bool sbl_cmd_global_write_concern_set(void)
{
    bson_t wc;
    if (!stored_field("defaultWriteConcern", &wc))
        return false;
    bson_destroy(&wc);
    return true;
}

/* mongod's implicit default into out (a new document). */
static void implicit_write_concern(bson_t *out)
{
    bson_init(out);
    if (sbl_repl_implicit_wc_majority())
        BSON_APPEND_UTF8(out, "w", "majority");
    else
        BSON_APPEND_INT32(out, "w", 1);
    BSON_APPEND_INT32(out, "wtimeout", 0);
}

bool sbl_cmd_default_write_concern(bson_t *out)
{
    if (!sbl_repl_enabled())
        return false;
    if (stored_field("defaultWriteConcern", out))
        return true;
    if (!sbl_repl_implicit_wc_majority())
        return false; /* {w: 1}: what a write without writeConcern does anyway */
    implicit_write_concern(out);
    return true;
}

static void append_defaults(bson_t *r)
{
    bson_t rc, wc, d;
    bool has_rc = stored_field("defaultReadConcern", &rc);
    bool has_wc = stored_field("defaultWriteConcern", &wc);
    if (has_rc) {
        BSON_APPEND_DOCUMENT(r, "defaultReadConcern", &rc);
        bson_destroy(&rc);
    } else {
        BSON_APPEND_DOCUMENT_BEGIN(r, "defaultReadConcern", &d);
        BSON_APPEND_UTF8(&d, "level", "local");
        bson_append_document_end(r, &d);
    }
    if (!has_wc)
        implicit_write_concern(&wc);
    BSON_APPEND_DOCUMENT(r, "defaultWriteConcern", &wc);
    bson_destroy(&wc);
    pthread_mutex_lock(&lock);
    bson_iter_t it;
    if (cached != NULL && bson_iter_init_find(&it, cached, "updateOpTime"))
        sbl_append_iter(r, "updateOpTime", -1, &it);
    if (cached != NULL && bson_iter_init_find(&it, cached, "updateWallClockTime"))
        sbl_append_iter(r, "updateWallClockTime", -1, &it);
    pthread_mutex_unlock(&lock);
    BSON_APPEND_UTF8(r, "defaultWriteConcernSource", has_wc ? "global" : "implicit");
    BSON_APPEND_UTF8(r, "defaultReadConcernSource", has_rc ? "global" : "implicit");
    BSON_APPEND_DATE_TIME(r, "localUpdateWallClockTime", sbl_now_ms());
}

int sbl_cmd_get_default_rw_concern(sbl_opctx_t *ctx, sbl_err_t *err)
{
    (void)err;
    append_defaults(ctx->reply);
    return 0;
}

static int check_read_default(const bson_t *rc, sbl_err_t *err)
{
    bson_iter_t it;
    bson_iter_init(&it, rc);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "level") != 0)
            return sbl_err_set(err, SBL_E_BadValue, "'%s' is not suitable for the default read "
                               "concern", k);
        const char *lv = BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
        if (strcmp(lv, "local") != 0 && strcmp(lv, "available") != 0 &&
            strcmp(lv, "majority") != 0)
            return sbl_err_set(err, SBL_E_BadValue, "level: '%s' is not permitted for the "
                               "default read concern", lv);
    }
    return 0;
}

static int check_write_default(const bson_t *wc, sbl_err_t *err)
{
    bson_iter_t it;
    bool has_w = false;
    bson_iter_init(&it, wc);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "w") == 0) {
            has_w = true;
            if (BSON_ITER_HOLDS_NUMBER(&it) && bson_iter_as_int64(&it) == 0)
                return sbl_err_set(err, SBL_E_BadValue, "Unacknowledged write concern is not "
                                   "allowed in the default write concern");
            if (!BSON_ITER_HOLDS_NUMBER(&it) &&
                !(BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_utf8(&it, NULL), "majority") == 0))
                return sbl_err_set(err, SBL_E_BadValue, "w must be a number or \"majority\"");
        } else if (strcmp(k, "wtimeout") != 0 && strcmp(k, "j") != 0) {
            return sbl_err_set(err, SBL_E_BadValue, "'%s' is not suitable for the default "
                               "write concern", k);
        }
    }
    if (!has_w && !bson_empty(wc))
        return sbl_err_set(err, SBL_E_BadValue, "The default write concern must have a 'w' field");
    return 0;
}

int sbl_cmd_set_default_rw_concern(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    bson_t rc, wc;
    bool has_rc = false, has_wc = false;
    const uint8_t *data;
    uint32_t len;
    if (!sbl_repl_enabled())
        return sbl_err_set(err, SBL_E_IllegalOperation, "setDefaultRWConcern is only supported on "
                           "replica sets and sharded clusters here (Sable)");
    if (bson_iter_init_find(&it, ctx->cmd, "defaultReadConcern") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_iter_document(&it, &len, &data);
        has_rc = bson_init_static(&rc, data, len);
        SBL_RET(check_read_default(&rc, err));
    }
    if (bson_iter_init_find(&it, ctx->cmd, "defaultWriteConcern") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_iter_document(&it, &len, &data);
        has_wc = bson_init_static(&wc, data, len);
        SBL_RET(check_write_default(&wc, err));
    }
    if (!has_rc && !has_wc)
        return sbl_err_set(err, SBL_E_BadValue, "At least one of the \"defaultReadConcern\" or "
                           "\"defaultWriteConcern\" fields must be present");
    SBL_RET(sbl_repl_check_write("config", err));
    bson_t cmd = BSON_INITIALIZER, ups, u, q, set, reply = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&cmd, "update", "settings");
    BSON_APPEND_ARRAY_BEGIN(&cmd, "updates", &ups);
    BSON_APPEND_DOCUMENT_BEGIN(&ups, "0", &u);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "q", &q);
    BSON_APPEND_UTF8(&q, "_id", DEFAULTS_ID);
    bson_append_document_end(&u, &q);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "u", &set);
    bson_t s;
    BSON_APPEND_DOCUMENT_BEGIN(&set, "$set", &s);
    if (has_rc)
        BSON_APPEND_DOCUMENT(&s, "defaultReadConcern", &rc);
    if (has_wc)
        BSON_APPEND_DOCUMENT(&s, "defaultWriteConcern", &wc);
    uint64_t ts = sbl_repl_last_op_ts();
    bson_t ot;
    BSON_APPEND_DOCUMENT_BEGIN(&s, "updateOpTime", &ot);
    bson_append_timestamp(&ot, "ts", 2, (uint32_t)(ts >> 32), (uint32_t)ts);
    bson_append_document_end(&s, &ot);
    BSON_APPEND_DATE_TIME(&s, "updateWallClockTime", sbl_now_ms());
    bson_append_document_end(&set, &s);
    bson_append_document_end(&u, &set);
    BSON_APPEND_BOOL(&u, "upsert", true);
    bson_append_document_end(&ups, &u);
    bson_append_array_end(&cmd, &ups);
    sbl_cmd_run("config", &cmd, &reply);
    int rc_ = 0;
    if (!bson_iter_init_find(&it, &reply, "ok") || bson_iter_as_double(&it) != 1.0 ||
        bson_iter_init_find(&it, &reply, "writeErrors"))
        rc_ = sbl_err_set(err, SBL_E_InternalError, "could not store the defaults");
    bson_destroy(&reply);
    bson_destroy(&cmd);
    if (rc_ != 0)
        return rc_;
    pthread_mutex_lock(&lock);
    refresh_locked(true);
    pthread_mutex_unlock(&lock);
    append_defaults(ctx->reply);
    return 0;
}

void sbl_cmd_append_wc_error(bson_t *out, int code, const char *msg)
{
    bson_t wce, info;
    BSON_APPEND_DOCUMENT_BEGIN(out, "writeConcernError", &wce);
    BSON_APPEND_INT32(&wce, "code", code);
    BSON_APPEND_UTF8(&wce, "codeName", sbl_err_name(code));
    BSON_APPEND_UTF8(&wce, "errmsg", msg);
    if (code == SBL_E_WriteConcernFailed) {
        BSON_APPEND_DOCUMENT_BEGIN(&wce, "errInfo", &info);
        BSON_APPEND_BOOL(&info, "wtimeout", true);
        bson_append_document_end(&wce, &info);
    }
    bson_append_document_end(out, &wce);
}

/* Parse the command's writeConcern field, at *wcit (NULL: none given). */
int sbl_cmd_parse_write_concern(const bson_iter_t *wcit, sbl_write_concern_t *wc, sbl_err_t *err)
{
    bson_iter_t it, w;
    wc->w = 1;
    wc->j = false;
    wc->given = false;
    wc->majority = false;
    wc->wtimeout_ms = 0;
    wc->mode[0] = '\0';
    bool repl = sbl_repl_enabled();
    if (wcit == NULL)
        return 0;
    it = *wcit;
    if (!BSON_ITER_HOLDS_DOCUMENT(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch,
                           "BSON field 'writeConcern' is the wrong type '%s', expected type 'object'",
                           BSON_ITER_HOLDS_UTF8(&it) ? "string" : "other");
    wc->given = true;
    bson_iter_recurse(&it, &w);
    while (bson_iter_next(&w)) {
        const char *k = bson_iter_key(&w);
        if (strcmp(k, "w") == 0) {
            if (BSON_ITER_HOLDS_UTF8(&w)) {
                const char *mode = bson_iter_utf8(&w, NULL);
                wc->w = 1;
                wc->mode[0] = '\0';
                if (strcmp(mode, "majority") == 0) {
                    wc->majority = repl; /* a standalone: as w: 1 */
                    continue;
                }
                if (!repl)
                    return sbl_err_set(err, SBL_E_BadValue,
                                       "cannot use non-majority 'w' mode \"%s\" when a host is "
                                       "not a member of a replica set", mode);
                /* a getLastErrorModes name, looked up when the write waits */
                if (strlen(mode) >= sizeof(wc->mode))
                    return sbl_err_set(err, SBL_E_UnknownReplWriteConcern, "No write concern "
                                       "mode named '%.64s...' found in replica set "
                                       "configuration", mode);
                strcpy(wc->mode, mode);
            } else if (BSON_ITER_HOLDS_NUMBER(&w)) {
                int64_t v = bson_iter_as_int64(&w);
                wc->majority = false;
                wc->mode[0] = '\0';
                if (v < 0 || v > 50)
                    return sbl_err_set(err, SBL_E_BadValue, "w has to be a number between 0 "
                                       "and 50 or a string, not %lld", (long long)v);
                if (v > 1 && repl && v > sbl_repl_member_count())
                    return sbl_err_set(err, SBL_E_UnsatisfiableWriteConcern,
                                       "Not enough data-bearing nodes");
                if (v > 1 && !repl)
                    return sbl_err_set(err, SBL_E_BadValue, "cannot use 'w' > 1 on a host that "
                                       "is not a member of a replica set");
                wc->w = (int)v;
            } else {
                return sbl_err_set(err, SBL_E_FailedToParse, "w has to be a number or string");
            }
        } else if (strcmp(k, "wtimeout") == 0 || strcmp(k, "wtimeoutMS") == 0) {
            if (BSON_ITER_HOLDS_NUMBER(&w))
                wc->wtimeout_ms = bson_iter_as_int64(&w);
        } else if (strcmp(k, "j") == 0 || strcmp(k, "fsync") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&w) && !BSON_ITER_HOLDS_NUMBER(&w))
                return sbl_err_set(err, SBL_E_FailedToParse, "%s must be a boolean", k);
            if (bson_iter_as_bool(&w))
                wc->j = true;
        }
    }
    /* w:"majority" is durable on the primary too: it waits for the journal, as
     * mongod with writeConcernMajorityJournalDefault (secondaries report only
     * journaled positions). */
    if (wc->majority)
        wc->j = true;
    return 0;
}
