/*
 * migrate_rangedel.c: the range deleter's service, after mongod 7.0's
 * (docs/sharding.md, "Migrations and the balancer", step 7): a donor's
 * copy of a range it gave away is deleted in the background, after the
 * migration left its critical section and committed, from the durable
 * task in config.rangeDeletions; and a recipient waits for the overlapping
 * deletions of its own before it clones a range back.
 *
 *   task   {donorShardId: <this shard>, no pending}: the migration
 *          committed, this shard's copy is an orphan.  Due
 *          orphanCleanupDelaySecs after this primary first saw it
 *          (whenToClean "delayed"; "now": at once), then deleted with
 *          fromMigrate entries (mig_delete_range) and the task removed.
 *   wait   a recipient whose range overlaps such a task waits for it,
 *          at most receiveChunkWaitForRangeDeleterTimeoutMS (mongod's
 *          ExceededTimeLimit after that).
 *
 * What must stay true: a task's range is never deleted while this shard
 * owns any of it; that holds because the range can only come back through
 * a migration, and a recipient clones nothing while an overlapping task is
 * here; and, should a collection be dropped and sharded again meanwhile,
 * because the deletion re-reads the version first and leaves alone every
 * document the shard owns (mig_delete_orphans).  Until the task goes, the shard's ownership filter hides the range
 * from routed reads and writes (src/shard/shard_filter.c, crud_write.c).
 * Only a primary runs tasks; one task at a time (run_mu).
 *
 * cleanupOrphaned (mongod 7.0's, on a shard's primary) waits here until
 * config.rangeDeletions holds no task for its namespace, then answers ok.
 */
#include "cmd/migrate_int.h"

#include "common/log.h"
#include "doc/doc.h"
#include "repl/repl.h"
#include "shard/shard.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_TASKS 64   /* tasks looked at per pass */
#define MAX_DUE 1024   /* tasks whose due time this primary keeps */
#define RETRY_MS 1000  /* a task that failed is tried again after this */

static atomic_llong delay_s = 900;         /* orphanCleanupDelaySecs (mongod 7.0's default) */
static atomic_llong overlap_wait_ms = 10000; /* receiveChunkWaitForRangeDeleterTimeoutMS */

/* When each task seen by this primary is due (by migrationSessionId), and
 * how many documents its range held when first counted (-1: not yet). */
static struct {
    char session[160];
    int64_t due_ms, orphans;
} due[MAX_DUE];
static int ndue;

static pthread_mutex_t run_mu = PTHREAD_MUTEX_INITIALIZER; /* one task at a time */
static pthread_mutex_t tab_mu = PTHREAD_MUTEX_INITIALIZER; /* due[] */
static pthread_mutex_t wake_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake_cv = PTHREAD_COND_INITIALIZER;
static bool woken, stopping, running;
static pthread_t th;

/* ---- parameters ---------------------------------------------------------- */

static const struct {
    const char *name;
    atomic_llong *v;
} params[] = {{"orphanCleanupDelaySecs", &delay_s},
              {"receiveChunkWaitForRangeDeleterTimeoutMS", &overlap_wait_ms}};

int sbl_cmd_rangedel_set_parameter(const char *k, const bson_iter_t *it, bson_t *reply,
                                   sbl_err_t *err)
{
    for (size_t i = 0; i < sizeof(params) / sizeof(params[0]); i++) {
        if (strcmp(k, params[i].name) != 0)
            continue;
        const char *s = BSON_ITER_HOLDS_UTF8(it) ? bson_iter_utf8(it, NULL) : NULL;
        char *end = NULL;
        long long n = s != NULL ? strtoll(s, &end, 10) : bson_iter_as_int64(it);
        if ((s != NULL && (end == s || *end != '\0')) ||
            (s == NULL && !BSON_ITER_HOLDS_NUMBER(it)) || n < 0)
            return sbl_err_set(err, SBL_E_BadValue, "Invalid value for %s: it must be at "
                               "least 0", k);
        if (reply != NULL)
            BSON_APPEND_INT32(reply, "was", (int32_t)atomic_load(params[i].v));
        atomic_store(params[i].v, n);
        mig_rangedel_kick(); /* a shorter delay may make a task due now */
        return 0;
    }
    return -1;
}

bool sbl_cmd_rangedel_append_parameter(bson_t *reply, const char *name)
{
    for (size_t i = 0; i < sizeof(params) / sizeof(params[0]); i++)
        if (strcmp(name, params[i].name) == 0) {
            BSON_APPEND_INT32(reply, name, (int32_t)atomic_load(params[i].v));
            return true;
        }
    return false;
}

/* ---- the tasks ------------------------------------------------------------ */

/* {donorShardId: <this shard>, pending: {$exists: false}} (and nss when
 * ns is not NULL): the tasks of ranges this shard gave away. */
static void append_ready_filter(bson_t *f, const char *ns)
{
    bson_t p;
    BSON_APPEND_UTF8(f, "donorShardId", sbl_shard_name());
    BSON_APPEND_DOCUMENT_BEGIN(f, "pending", &p);
    BSON_APPEND_BOOL(&p, "$exists", false);
    bson_append_document_end(f, &p);
    if (ns != NULL)
        BSON_APPEND_UTF8(f, "nss", ns);
}

/* Up to max such tasks into docs[] (each initialised); how many. */
static int load_ready(const char *ns, const char *session, bson_t *docs, int max)
{
    bson_t cmd = BSON_INITIALIZER, f;
    BSON_APPEND_UTF8(&cmd, "find", "rangeDeletions");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &f);
    append_ready_filter(&f, ns);
    if (session != NULL)
        BSON_APPEND_UTF8(&f, "migrationSessionId", session);
    bson_append_document_end(&cmd, &f);
    int n = mig_config_docs(&cmd, max, docs);
    bson_destroy(&cmd);
    return n;
}

bool mig_task_background(const bson_t *d)
{
    bson_iter_t it;
    const char *donor = sbl_doc_utf8(d, "donorShardId");
    return sbl_shard_name() != NULL && donor != NULL && strcmp(donor, sbl_shard_name()) == 0 &&
           !bson_iter_init_find(&it, d, "pending");
}

/* The index of session's entry (tab_mu held), registered on first sight;
 * -1 when the table is full. */
static int entry_of(const bson_t *d, const char *session)
{
    for (int i = 0; i < ndue; i++)
        if (strcmp(due[i].session, session) == 0)
            return i;
    if (ndue == MAX_DUE)
        return -1;
    const char *when = sbl_doc_utf8(d, "whenToClean");
    int64_t at = mig_now_ms();
    if (when == NULL || strcmp(when, "now") != 0)
        at += atomic_load(&delay_s) * 1000;
    snprintf(due[ndue].session, sizeof(due[ndue].session), "%s", session);
    due[ndue].due_ms = at;
    due[ndue].orphans = -1;
    return ndue++;
}

/* When session's task is due. */
static int64_t due_of(const bson_t *d, const char *session)
{
    pthread_mutex_lock(&tab_mu);
    int i = entry_of(d, session);
    int64_t at = i >= 0 ? due[i].due_ms : mig_now_ms();
    pthread_mutex_unlock(&tab_mu);
    return at;
}

static void due_set(const char *session, int64_t at)
{
    pthread_mutex_lock(&tab_mu);
    for (int i = 0; i < ndue; i++)
        if (strcmp(due[i].session, session) == 0)
            due[i].due_ms = at;
    pthread_mutex_unlock(&tab_mu);
}

static void due_forget(const char *session)
{
    pthread_mutex_lock(&tab_mu);
    for (int i = 0; i < ndue; i++)
        if (strcmp(due[i].session, session) == 0) {
            due[i] = due[--ndue];
            break;
        }
    pthread_mutex_unlock(&tab_mu);
}

int64_t sbl_cmd_rangedel_orphans(const char *ns)
{
    if (sbl_shard_name() == NULL)
        return 0;
    bson_t docs[MAX_TASKS];
    int n = load_ready(ns, NULL, docs, MAX_TASKS);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const char *session = sbl_doc_utf8(&docs[i], "migrationSessionId");
        if (session == NULL)
            continue;
        pthread_mutex_lock(&tab_mu);
        int e = entry_of(&docs[i], session);
        int64_t known = e >= 0 ? due[e].orphans : -1;
        pthread_mutex_unlock(&tab_mu);
        mig_spec_t s;
        sbl_err_t err = {0};
        if (known < 0 && mig_task_spec(&docs[i], &s, &err) == 0) {
            known = mig_count_range(&s); /* once per task: the deleter only lowers it */
            mig_spec_free(&s);
            pthread_mutex_lock(&tab_mu);
            for (int j = 0; j < ndue && known >= 0; j++)
                if (strcmp(due[j].session, session) == 0)
                    due[j].orphans = known;
            pthread_mutex_unlock(&tab_mu);
        }
        if (known > 0)
            total += known;
    }
    mig_free_docs(docs, n);
    return total;
}

/* Run one task (run_mu held): delete its range, then the task.  How many
 * documents went, -1 on an error (err). */
static int64_t run_task(const bson_t *d, sbl_err_t *err)
{
    const char *session = sbl_doc_utf8(d, "migrationSessionId");
    mig_spec_t s;
    if (session == NULL || mig_task_spec(d, &s, err) != 0)
        return -1;
    int64_t t0 = mig_now_ms();
    int64_t n = mig_delete_orphans(&s, err); /* never what this shard owns now */
    if (n >= 0 && mig_task_delete(session, err) != 0)
        n = -1;
    if (n >= 0) {
        bson_t attr = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&attr, "namespace", s.ns);
        BSON_APPEND_UTF8(&attr, "migrationSessionId", session);
        BSON_APPEND_INT64(&attr, "numDeleted", n);
        BSON_APPEND_INT64(&attr, "durationMillis", mig_now_ms() - t0);
        sbl_log(SBL_LOG_INFO, "SHARDING", 21990, "Finished deleting documents in orphan range",
                &attr);
        bson_destroy(&attr);
        due_forget(session);
    }
    mig_spec_free(&s);
    return n;
}

int64_t mig_rangedel_run_now(const char *session, sbl_err_t *err)
{
    bson_t docs[1];
    pthread_mutex_lock(&run_mu);
    int n = load_ready(NULL, session, docs, 1);
    int64_t deleted = n == 1 ? run_task(&docs[0], err) : 0; /* none: already run */
    pthread_mutex_unlock(&run_mu);
    mig_free_docs(docs, n);
    return deleted;
}

/* One pass: run every task that is due.  Returns the milliseconds until
 * the next one is (-1: none left). */
static int64_t pass(void)
{
    /* a new primary's recovery (migrate_recover.c) settles what migrations
     * left and clears the versions cached before: tasks wait for it */
    if (!sbl_repl_writable() || sbl_shard_name() == NULL || !sbl_shard_metadata_known())
        return -1;
    bson_t docs[MAX_TASKS];
    pthread_mutex_lock(&run_mu);
    int n = load_ready(NULL, NULL, docs, MAX_TASKS);
    int64_t next = -1;
    bool ran = false;
    for (int i = 0; i < n && !stopping; i++) {
        const char *session = sbl_doc_utf8(&docs[i], "migrationSessionId");
        if (session == NULL)
            continue;
        int64_t at = due_of(&docs[i], session), now = mig_now_ms();
        if (at <= now && !mig_fp_on(MIG_FP_SUSPEND_RANGEDEL) && sbl_repl_writable()) {
            sbl_err_t e = {0};
            if (run_task(&docs[i], &e) >= 0) {
                ran = true;
                continue;
            }
            mig_log("range deletion %s: %s; trying again", session, e.msg);
            due_set(session, (at = mig_now_ms() + RETRY_MS));
        }
        int64_t in = at > now ? at - now : 50;
        if (next < 0 || in < next)
            next = in;
    }
    pthread_mutex_unlock(&run_mu);
    mig_free_docs(docs, n);
    return ran && n == MAX_TASKS ? 0 : next; /* more may be waiting behind those */
}

static void *rangedel_main(void *arg)
{
    (void)arg;
    sbl_thread_name("rangedeleter");
    bool was_primary = false;
    pthread_mutex_lock(&wake_mu);
    while (!stopping) {
        pthread_mutex_unlock(&wake_mu);
        bool primary = sbl_repl_writable();
        if (primary && !was_primary) { /* a new primaryship: each delay starts again */
            pthread_mutex_lock(&tab_mu);
            ndue = 0;
            pthread_mutex_unlock(&tab_mu);
        }
        was_primary = primary;
        int64_t next = pass();
        /* look again when the next task is due, at least every second (a
         * step-up, a task written by recovery) */
        int64_t wait_ms = next < 0 || next > 1000 ? 1000 : next;
        pthread_mutex_lock(&wake_mu);
        if (!woken && !stopping) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += wait_ms / 1000;
            ts.tv_nsec += (wait_ms % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&wake_cv, &wake_mu, &ts);
        }
        woken = false;
    }
    pthread_mutex_unlock(&wake_mu);
    sbl_session_release_thread();
    return NULL;
}

void mig_rangedel_kick(void)
{
    pthread_mutex_lock(&wake_mu);
    woken = true;
    pthread_cond_signal(&wake_cv);
    pthread_mutex_unlock(&wake_mu);
}

void mig_rangedel_start(void)
{
    if (running)
        return;
    stopping = false;
    if (pthread_create(&th, NULL, rangedel_main, NULL) == 0)
        running = true;
}

void mig_rangedel_stop(void)
{
    if (!running)
        return;
    pthread_mutex_lock(&wake_mu);
    stopping = true;
    pthread_cond_signal(&wake_cv);
    pthread_mutex_unlock(&wake_mu);
    pthread_join(th, NULL);
    running = false;
}

/* ---- the recipient's wait ------------------------------------------------- */

/* Does the task's range overlap s's? */
static bool overlaps(const bson_t *d, const mig_spec_t *s)
{
    bson_t r, mn, mx;
    if (!mig_doc_of(d, "range", &r) || !mig_doc_of(&r, "min", &mn) || !mig_doc_of(&r, "max", &mx))
        return true; /* unreadable: wait for it rather than risk the range */
    return sbl_doc_compare(&mn, s->max) < 0 && sbl_doc_compare(s->min, &mx) < 0;
}

int mig_rangedel_await_overlap(const mig_spec_t *s, const atomic_bool *stop, sbl_err_t *err)
{
    int64_t until = mig_now_ms() + atomic_load(&overlap_wait_ms);
    bool logged = false;
    for (;;) {
        bson_t docs[MAX_TASKS];
        int n = sbl_shard_name() != NULL ? load_ready(s->ns, NULL, docs, MAX_TASKS) : 0;
        bool any = false;
        for (int i = 0; i < n && !any; i++)
            any = overlaps(&docs[i], s);
        mig_free_docs(docs, n);
        if (!any || atomic_load(stop))
            return 0; /* stopped: the receive is being aborted; it clones nothing */
        if (mig_now_ms() >= until)
            return sbl_err_set(err, SBL_E_ExceededTimeLimit, "Exceeded deadline waiting for "
                               "overlapping range deletion to finish");
        if (!logged)
            mig_log("migration into %s: waiting for an overlapping range deletion to finish",
                    s->ns);
        logged = true;
        usleep(50 * 1000);
    }
}

/* ---- cleanupOrphaned ------------------------------------------------------ */

#define CLEANUP_POLL_MS 100

/* How many range deletion tasks config.rangeDeletions holds for ns (pending
 * or not, this shard donor or recipient), up to MAX_TASKS. */
static int tasks_of(const char *ns)
{
    bson_t cmd = BSON_INITIALIZER, f, docs[MAX_TASKS];
    BSON_APPEND_UTF8(&cmd, "find", "rangeDeletions");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &f);
    BSON_APPEND_UTF8(&f, "nss", ns);
    bson_append_document_end(&cmd, &f);
    int n = mig_config_docs(&cmd, MAX_TASKS, docs);
    bson_destroy(&cmd);
    mig_free_docs(docs, n);
    return n;
}

/* Is ns a valid "<db>.<collection>" (mongod's NamespaceString::isValid)? */
static bool valid_ns(const char *ns)
{
    const char *dot = strchr(ns, '.');
    if (dot == NULL || dot == ns || dot[1] == '\0' || (size_t)(dot - ns) >= 64)
        return false;
    for (const char *p = ns; p < dot; p++)
        if (strchr("/\\. \"$", *p) != NULL)
            return false;
    return true;
}

/* startingFromKey, which mongod 7.0 no longer uses, is still checked as it
 * was: for a sharded ns (its version read afresh from the config servers, as
 * mongod refreshes first), the key must hold exactly the shard key's fields
 * (in any order, none an array); 265 OrphanedRangeCleanUpFailed otherwise. */
static int check_start_key(const char *ns, const bson_t *start, sbl_err_t *err)
{
    sbl_err_t e = {0};
    sbl_shard_filter_t *f;
    if (sbl_shard_refresh_filter(ns, &f, &e) != 0)
        return 0; /* not known to the config servers: nothing sharded to check */
    const bson_t *key = f != NULL ? sbl_shard_filter_key(f) : NULL;
    bool ok = key == NULL || bson_count_keys(key) == bson_count_keys(start);
    bson_iter_t k, s;
    if (ok && key != NULL && bson_iter_init(&k, key))
        while (ok && bson_iter_next(&k)) /* each named whole, not an array (mongod's isShardKey) */
            ok = bson_iter_init_find(&s, start, bson_iter_key(&k)) && !BSON_ITER_HOLDS_ARRAY(&s);
    sbl_shard_filter_release(f);
    if (ok)
        return 0;
    return sbl_err_set(err, SBL_E_OrphanedRangeCleanUpFailed, "Could not cleanup orphaned "
                       "data because start key does not match shard key pattern");
}

int sbl_cmd_cleanup_orphaned(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    const char *ns = "";
    if (bson_iter_init_find(&it, ctx->cmd, "cleanupOrphaned")) {
        if (!BSON_ITER_HOLDS_UTF8(&it))
            return sbl_err_set(err, SBL_E_TypeMismatch, "wrong type for 'cleanupOrphaned' "
                               "field, expected string, found %s",
                               sbl_type_name(bson_iter_type(&it)));
        ns = bson_iter_utf8(&it, NULL);
    }
    if (!valid_ns(ns))
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Invalid namespace: %s", ns);
    bson_t start = BSON_INITIALIZER;
    if (bson_iter_init_find(&it, ctx->cmd, "startingFromKey")) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&it))
            return sbl_err_set(err, SBL_E_TypeMismatch, "wrong type for 'startingFromKey' "
                               "field, expected object, found %s",
                               sbl_type_name(bson_iter_type(&it)));
        sbl_iter_doc(&it, &start);
    }
    if (sbl_shard_name() == NULL)
        return sbl_err_set(err, SBL_E_IllegalOperation, "server is not part of a sharded "
                           "cluster or the sharding metadata is not yet initialized.");
    if (!bson_empty(&start))
        SBL_RET(check_start_key(ns, &start, err));
    sbl_coll_t *c;
    sbl_err_t e = {0};
    if (sbl_coll_open(ctx->ss, ns, false, &c, NULL, &e) != 0) {
        mig_log("cleanupOrphaned skipping waiting for orphaned data cleanup because %s does "
                "not exist", ns);
        return 0;
    }
    sbl_coll_release(c);
    /* mongod waits for the range deleter's tasks of the collection; an unsharded one has
     * none, so it answers at once as mongod's "is not sharded" does */
    bool logged = false;
    for (int n; (n = tasks_of(ns)) > 0;) {
        if (!logged)
            mig_log("cleanupOrphaned going to wait for range deletion tasks to complete on %s "
                    "(%d remaining)", ns, n);
        logged = true;
        SBL_RET(sbl_op_check_interrupt(ctx, err));
        SBL_RET(sbl_op_check_step_down(ctx, err));
        usleep(CLEANUP_POLL_MS * 1000);
    }
    return 0;
}
