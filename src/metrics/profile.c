/*
 * profile.c: what happens when a command finishes: its documents are counted
 * into metrics.document, a slow one is logged ("Slow query", id 51803, with
 * MongoDB's attributes), and the database profiler records it in
 * <db>.system.profile at level 1 (slow ones) or 2 (all).
 *
 * slowms and the sample rate are server-wide (as in MongoDB); the level is
 * per database.  What must stay true: with no database profiling, deciding
 * costs two atomic loads and takes no lock.  system.profile is an ordinary
 * collection here (Sable has no capped collections yet): each write trims it
 * to the newest SBL_PROFILE_MAX_ENTRIES entries, oldest _id first.
 */
#include "metrics/metrics.h"
#include "doc/doc.h"
#include "common/log.h"
#include "storage/storage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

/* ---- settings ----------------------------------------------------------------- */

#define MAX_PROFILED_DBS 64

static atomic_int slowms = 100;
static _Atomic double sample_rate = 1.0;
static atomic_int default_level;
static atomic_int dbs_profiled; /* entries of db_levels with level > 0 */

static struct {
    char db[64];
    int level;
} db_levels[MAX_PROFILED_DBS];
static size_t n_db_levels;
static uv_mutex_t levels_mu;
static uv_once_t levels_once = UV_ONCE_INIT;

static void levels_init(void)
{
    uv_mutex_init(&levels_mu);
}

void sbl_profile_set_defaults(int level, int ms, double rate)
{
    atomic_store(&default_level, level);
    atomic_store(&slowms, ms);
    atomic_store(&sample_rate, rate);
}

int sbl_profile_slowms(void)
{
    return atomic_load_explicit(&slowms, memory_order_relaxed);
}

double sbl_profile_sample_rate(void)
{
    return atomic_load_explicit(&sample_rate, memory_order_relaxed);
}

void sbl_profile_set_slowms(int ms)
{
    atomic_store(&slowms, ms);
}

void sbl_profile_set_sample_rate(double rate)
{
    atomic_store(&sample_rate, rate);
}

static int find_db(const char *db)
{
    for (size_t i = 0; i < n_db_levels; i++)
        if (strcmp(db_levels[i].db, db) == 0)
            return (int)i;
    return -1;
}

int sbl_profile_level(const char *db)
{
    int dflt = atomic_load_explicit(&default_level, memory_order_relaxed);
    if (atomic_load_explicit(&dbs_profiled, memory_order_relaxed) == 0 && dflt == 0)
        return 0;
    uv_once(&levels_once, levels_init);
    uv_mutex_lock(&levels_mu);
    int i = find_db(db);
    int level = i >= 0 ? db_levels[i].level : dflt;
    uv_mutex_unlock(&levels_mu);
    return level;
}

int sbl_profile_set_level(const char *db, int level)
{
    uv_once(&levels_once, levels_init);
    uv_mutex_lock(&levels_mu);
    int i = find_db(db);
    int prev = i >= 0 ? db_levels[i].level : atomic_load(&default_level);
    if (i < 0 && n_db_levels < MAX_PROFILED_DBS && strlen(db) < sizeof(db_levels[0].db)) {
        i = (int)n_db_levels++;
        snprintf(db_levels[i].db, sizeof(db_levels[i].db), "%s", db);
        db_levels[i].level = 0;
    }
    if (i >= 0) {
        if (db_levels[i].level > 0)
            atomic_fetch_sub(&dbs_profiled, 1);
        db_levels[i].level = level;
        if (level > 0)
            atomic_fetch_add(&dbs_profiled, 1);
    }
    uv_mutex_unlock(&levels_mu);
    return prev;
}

/* ---- counting the reply --------------------------------------------------------- */

static int64_t reply_int(const bson_t *reply, const char *path)
{
    bson_iter_t it, f;
    if (strchr(path, '.') == NULL) /* our own reply: a valid document */
        return sbl_doc_find_top(reply, path, &f) && BSON_ITER_HOLDS_NUMBER(&f)
                   ? bson_iter_as_int64(&f)
                   : 0;
    if (bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, path, &f) &&
        BSON_ITER_HOLDS_NUMBER(&f))
        return bson_iter_as_int64(&f);
    return 0;
}

static int64_t array_count(const bson_t *reply, const char *path)
{
    bson_iter_t it, f, child;
    int64_t n = 0;
    bool found = strchr(path, '.') == NULL ? sbl_doc_find_top(reply, path, &f)
                                           : bson_iter_init(&it, reply) &&
                                                 bson_iter_find_descendant(&it, path, &f);
    if (found && BSON_ITER_HOLDS_ARRAY(&f) && bson_iter_recurse(&f, &child))
        while (bson_iter_next(&child))
            n++;
    return n;
}

typedef struct counts {
    int64_t nreturned, ninserted, nmodified, nmatched, ndeleted, nupserted;
} counts_t;

static void count_reply(const sbl_op_report_t *r, counts_t *c)
{
    const char *name = r->op->cmd_name;
    memset(c, 0, sizeof(*c));
    if (r->reply == NULL)
        return;
    const sbl_write_counts_t *w = &r->writes;
    if (strcmp(name, "insert") == 0) {
        c->ninserted = w->known ? w->n : reply_int(r->reply, "n");
    } else if (strcmp(name, "update") == 0) {
        c->nupserted = w->known ? w->nupserted : array_count(r->reply, "upserted");
        c->nmatched = (w->known ? w->n : reply_int(r->reply, "n")) - c->nupserted;
        c->nmodified = w->known ? w->nmodified : reply_int(r->reply, "nModified");
        c->ninserted = c->nupserted;
    } else if (strcmp(name, "delete") == 0) {
        c->ndeleted = w->known ? w->n : reply_int(r->reply, "n");
    } else if (strcmp(name, "find") == 0 || strcmp(name, "aggregate") == 0) {
        c->nreturned = r->nreturned >= 0 ? r->nreturned : array_count(r->reply, "cursor.firstBatch");
    } else if (strcmp(name, "getMore") == 0) {
        c->nreturned = r->nreturned >= 0 ? r->nreturned : array_count(r->reply, "cursor.nextBatch");
    } else if (strcasecmp(name, "findAndModify") == 0) {
        bson_iter_t it;
        bool found = bson_iter_init_find(&it, r->reply, "value") && !BSON_ITER_HOLDS_NULL(&it);
        bool upserted = false;
        bson_iter_t le, up;
        if (bson_iter_init(&le, r->reply) &&
            bson_iter_find_descendant(&le, "lastErrorObject.upserted", &up))
            upserted = true;
        bool removed = false;
        bson_iter_t rm;
        if (bson_iter_init_find(&rm, r->op->cmd, "remove") && bson_iter_as_bool(&rm))
            removed = true;
        c->nreturned = found ? 1 : 0;
        if (removed)
            c->ndeleted = found ? 1 : 0;
        else if (upserted)
            c->ninserted = 1;
        else if (reply_int(r->reply, "lastErrorObject.n") > 0)
            c->nmodified = 1;
    }
}

/* ---- the log line and the profile entry ------------------------------------------- */

static void append_common(bson_t *b, const sbl_op_report_t *r, const counts_t *c, bool log)
{
    if (r->plan_summary != NULL)
        BSON_APPEND_UTF8(b, "planSummary", r->plan_summary);
    if (r->plan_summary != NULL || r->keys_examined || r->docs_examined) {
        BSON_APPEND_INT64(b, "keysExamined", r->keys_examined);
        BSON_APPEND_INT64(b, "docsExamined", r->docs_examined);
    }
    if (r->cursor_id == 0 && r->plan_summary != NULL)
        BSON_APPEND_BOOL(b, "cursorExhausted", true);
    if (r->cursor_id != 0)
        BSON_APPEND_INT64(b, "cursorid", r->cursor_id);
    BSON_APPEND_INT32(b, "numYields", 0);
    if (c->nreturned || r->plan_summary != NULL)
        BSON_APPEND_INT64(b, "nreturned", c->nreturned);
    if (c->ninserted)
        BSON_APPEND_INT64(b, "ninserted", c->ninserted);
    if (c->nmatched || c->nmodified)
        BSON_APPEND_INT64(b, "nMatched", c->nmatched);
    if (c->nmodified)
        BSON_APPEND_INT64(b, "nModified", c->nmodified);
    if (c->nupserted)
        BSON_APPEND_INT64(b, "nUpserted", c->nupserted);
    if (c->ndeleted)
        BSON_APPEND_INT64(b, "ndeleted", c->ndeleted);
    if (r->rc != 0) {
        BSON_APPEND_UTF8(b, log ? "errMsg" : "errMsg", r->errmsg ? r->errmsg : "");
        BSON_APPEND_UTF8(b, "errName", sbl_err_name(r->rc));
        BSON_APPEND_INT32(b, "errCode", r->rc);
    }
    BSON_APPEND_INT64(b, log ? "reslen" : "responseLength", r->reply ? r->reply->len : 0);
}

static void log_slow(const sbl_op_report_t *r, const counts_t *c)
{
    bson_t a = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&a, "type", "command");
    BSON_APPEND_UTF8(&a, "ns", r->op->ns);
    if (r->op->app_name != NULL)
        BSON_APPEND_UTF8(&a, "appName", r->op->app_name);
    sbl_metrics_append_cmd(&a, "command", r->op->cmd);
    append_common(&a, r, c, true);
    if (r->op->client != NULL)
        BSON_APPEND_UTF8(&a, "remote", r->op->client);
    BSON_APPEND_UTF8(&a, "protocol", "op_msg");
    BSON_APPEND_INT64(&a, "durationMillis", r->duration_us / 1000);
    bool write = strcmp(r->op->op_type, "insert") == 0 || strcmp(r->op->op_type, "update") == 0 ||
                 strcmp(r->op->op_type, "remove") == 0;
    sbl_log(SBL_LOG_INFO, write ? "WRITE" : "COMMAND", 51803, "Slow query", &a);
    bson_destroy(&a);
}

/* Insert entry into db.system.profile and drop the oldest beyond the bound.
 * A failure (e.g. a write conflict with a concurrent profiler write) loses
 * this entry only. */
static void profile_write(const char *db, bson_t *entry)
{
    char ns[300];
    sbl_session_t *s = sbl_session_get();
    sbl_coll_t *c = NULL;
    sbl_err_t err = {0};
    sbl_coll_stats_t st;

    snprintf(ns, sizeof(ns), "%s.system.profile", db);
    if (s == NULL || sbl_coll_open(s, ns, true, &c, NULL, &err) != 0)
        return;
    if (sbl_txn_begin(s, &err) != 0)
        goto out;
    if (sbl_write(s, c, SBL_WRITE_INSERT, NULL, entry, NULL, &err) != 0 ||
        sbl_txn_commit(s, &err) != 0) {
        sbl_txn_abort(s);
        goto out;
    }
    if (sbl_coll_stats(s, c, &st, &err) == 0 && st.count > SBL_PROFILE_MAX_ENTRIES) {
        int64_t excess = st.count - SBL_PROFILE_MAX_ENTRIES;
        sbl_scan_t *scan = NULL;
        bson_t *old[64];
        int n = 0;
        if (sbl_scan_open(s, c, NULL, false, &scan, &err) != 0)
            goto out;
        while (n < excess && n < 64) {
            bson_t d;
            bool done = false;
            if (sbl_scan_next(scan, &d, &done, &err) != 0 || done)
                break;
            old[n++] = bson_copy(&d);
        }
        sbl_scan_close(scan);
        if (sbl_txn_begin(s, &err) == 0) {
            int rc = 0;
            for (int i = 0; i < n && rc == 0; i++)
                rc = sbl_write(s, c, SBL_WRITE_DELETE, old[i], NULL, NULL, &err);
            if (rc == 0)
                rc = sbl_txn_commit(s, &err);
            if (rc != 0)
                sbl_txn_abort(s);
        }
        for (int i = 0; i < n; i++)
            bson_destroy(old[i]);
    }
out:
    sbl_coll_release(c);
}

static void profile(const sbl_op_report_t *r, const counts_t *c)
{
    bson_t e = BSON_INITIALIZER;
    bson_oid_t oid;
    bson_oid_init(&oid, NULL);
    BSON_APPEND_OID(&e, "_id", &oid);
    BSON_APPEND_UTF8(&e, "op", r->op->op_type);
    BSON_APPEND_UTF8(&e, "ns", r->op->ns);
    sbl_metrics_append_cmd(&e, "command", r->op->cmd);
    append_common(&e, r, c, false);
    BSON_APPEND_UTF8(&e, "protocol", "op_msg");
    BSON_APPEND_INT64(&e, "millis", r->duration_us / 1000);
    BSON_APPEND_INT64(&e, "opid", r->op->opid);
    BSON_APPEND_DATE_TIME(&e, "ts", r->op->start_ms + r->duration_us / 1000);
    BSON_APPEND_UTF8(&e, "client", r->op->client != NULL ? r->op->client : "");
    if (r->op->app_name != NULL)
        BSON_APPEND_UTF8(&e, "appName", r->op->app_name);
    bson_t u;
    BSON_APPEND_ARRAY_BEGIN(&e, "allUsers", &u);
    bson_append_array_end(&e, &u);
    BSON_APPEND_UTF8(&e, "user", "");
    profile_write(r->op->db, &e);
    bson_destroy(&e);
}

static bool sampled(void)
{
    double rate = sbl_profile_sample_rate();
    if (rate >= 1.0)
        return true;
    static _Thread_local unsigned seed;
    if (seed == 0)
        seed = (unsigned)(uintptr_t)&seed ^ (unsigned)uv_hrtime();
    return (double)rand_r(&seed) / RAND_MAX < rate;
}

void sbl_metrics_op_done(const sbl_op_report_t *r)
{
    counts_t c;
    count_reply(r, &c);
    sbl_metrics_count_docs(SBL_DOC_RETURNED, c.nreturned);
    sbl_metrics_count_docs(SBL_DOC_INSERTED, c.ninserted);
    sbl_metrics_count_docs(SBL_DOC_UPDATED, c.nmodified);
    sbl_metrics_count_docs(SBL_DOC_DELETED, c.ndeleted);

    int64_t ms = r->duration_us / 1000;
    bool slow = ms > sbl_profile_slowms();
    int level = sbl_profile_level(r->op->db);
    if (!slow && level < 2)
        return;
    if (!sampled())
        return;
    if (slow)
        log_slow(r, &c);
    size_t dblen = strlen(r->op->db);
    bool on_profile = strncmp(r->op->ns, r->op->db, dblen) == 0 &&
                      strcmp(r->op->ns + dblen, ".system.profile") == 0;
    if (!on_profile && (level == 2 || (level == 1 && slow)))
        profile(r, &c);
}
