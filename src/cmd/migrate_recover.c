/*
 * migrate_recover.c: what lets a chunk migration survive a restart or a
 * failover of its donor or recipient (mongod's design: the donor's
 * config.migrationCoordinators document, each shard's config.rangeDeletions
 * task; shapes in migrate_int.h), and the recovery that finishes what a
 * migration left:
 *
 *   coordinator document (donor)  no decision yet: the config servers'
 *        owner of the chunk decides (the donor: aborted, after the config
 *        servers bumped the chunk's version so a late commit cannot land;
 *        else committed: mig_chunk_owner);
 *        the decision is written; committed, the donor's task becomes the
 *        range deleter's (migrate_rangedel.c: ready, deleted later in the
 *        background), aborted, it goes; then the recipient hears it
 *        (_recvChunkReleaseCritSec or _recvChunkAbort, again until it
 *        answers) and the document goes.
 *   pending task of the donor without a coordinator document: the same
 *        from the owner.  A ready one is the range deleter's, not
 *        recovery's: it holds no critical section and blocks nothing (the
 *        ownership filter hides its range).
 *   task of the recipient whose receive no longer runs here: the donor
 *        decides (its abort or release); when the donor no longer runs that
 *        migration either (it restarted or finished), the config servers'
 *        owner does (this shard: keep the range; else delete it).
 *
 * What must stay true: a copy of a range whose owner is not yet known is
 * never seen by a routed command: a member that starts (or becomes
 * primary) with a pending task or a coordinator document holds the
 * collection's critical section (routed commands wait, then get StaleConfig
 * and the router retries) until the range's fate is settled on this shard;
 * a known orphan (a ready task) is hidden by the ownership filter instead.
 * No new migration starts on a shard holding either kind of document (the
 * background tasks aside).  Every write is w: majority.
 */
#include "cmd/failpoint.h"
#include "cmd/migrate_int.h"

#include "common/clock.h"
#include "common/log.h"
#include "doc/doc.h"
#include "repl/repl.h"
#include "server/server.h"
#include "shard/shard.h"
#include "storage/storage.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define WC_TIMEOUT_MS 10000
#define FP_MAX_MS 120000
#define MAX_DOCS 16 /* documents looked at per pass (one migration per shard) */

/* ---- fail points --------------------------------------------------------- */

static const char *const fp_names[MIG_FP_N] = {
    "moveChunkHangAtStep1", "moveChunkHangAtStep2", "moveChunkHangAtStep3",
    "moveChunkHangAtStep4", "moveChunkHangAtStep5", "moveChunkHangAtStep6",
    "migrateThreadHangAtStep1", "migrateThreadHangAtStep2", "hangBeforeCommitChunkMigration",
    "hangMigrationRecovery", "suspendRangeDeletion"};
static atomic_bool fp_on[MIG_FP_N];
static atomic_bool stopping;

int sbl_cmd_mig_fail_point(const char *name, bool on)
{
    for (int i = 0; i < MIG_FP_N; i++)
        if (strcmp(name, fp_names[i]) == 0) {
            atomic_store(&fp_on[i], on);
            if (!on && i == MIG_FP_SUSPEND_RANGEDEL)
                mig_rangedel_kick();
            return 0;
        }
    return -1;
}

bool mig_fp_on(int fp)
{
    return atomic_load(&fp_on[fp]);
}

void mig_fp_hold(int fp)
{
    if (!atomic_load(&fp_on[fp]))
        return;
    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&attr, "failPoint", fp_names[fp]);
    sbl_log(SBL_LOG_INFO, "SHARDING", 22002, "Migration held by a fail point", &attr);
    bson_destroy(&attr);
    int64_t until = mig_now_ms() + FP_MAX_MS;
    while (atomic_load(&fp_on[fp]) && !atomic_load(&stopping) && mig_now_ms() < until)
        usleep(20 * 1000);
}

/* ---- the documents ------------------------------------------------------- */

/* Run a write on config with w: majority; its writeConcernError is an error.
 * sbl_cmd_run waits for that write concern (dispatch.c), so the document is
 * majority-committed when this returns: before the server's own commands
 * waited, a donor killed 0.1 s into a migration left a committed migration
 * whose documents neither other member of its set had, and the member
 * elected kept the range as an orphan.  No wait for the stable timestamp
 * (mig_await_majority's second part): these documents are read locally, by
 * this shard's recovery after a step-up and by the migration itself, never
 * by a majority read. */
static int cfg_write(bson_t *cmd, sbl_err_t *err)
{
    bson_t wc, reply;
    bson_iter_t it, f;
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    BSON_APPEND_INT32(&wc, "wtimeout", WC_TIMEOUT_MS);
    bson_append_document_end(cmd, &wc);
    int rc = sbl_cmd_run_checked("config", cmd, &reply, err);
    if (rc == 0 && bson_iter_init_find(&it, &reply, "writeConcernError") &&
        bson_iter_recurse(&it, &f))
        rc = sbl_err_set(err, bson_iter_find(&f, "code") ? (int)bson_iter_as_int64(&f)
                                                         : SBL_E_WriteConcernFailed,
                         "the migration's state was not written to a majority");
    bson_destroy(&reply);
    return rc;
}

static void append_range(bson_t *d, const mig_spec_t *s)
{
    bson_t r;
    BSON_APPEND_UTF8(d, "nss", s->ns);
    BSON_APPEND_DOCUMENT_BEGIN(d, "range", &r);
    BSON_APPEND_DOCUMENT(&r, "min", s->min);
    BSON_APPEND_DOCUMENT(&r, "max", s->max);
    bson_append_document_end(d, &r);
    BSON_APPEND_DOCUMENT(d, "keyPattern", s->key);
}

static int insert_doc(const char *coll, const bson_t *doc, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, docs;
    BSON_APPEND_UTF8(&cmd, "insert", coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "documents", &docs);
    BSON_APPEND_DOCUMENT(&docs, "0", doc);
    bson_append_array_end(&cmd, &docs);
    int rc = cfg_write(&cmd, err);
    bson_destroy(&cmd);
    return rc;
}

/* Update (u non-NULL) or delete the documents of coll naming session. */
static int session_write(const char *coll, const char *session, const bson_t *u, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, arr, st, q;
    BSON_APPEND_UTF8(&cmd, u ? "update" : "delete", coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, u ? "updates" : "deletes", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &st);
    BSON_APPEND_DOCUMENT_BEGIN(&st, "q", &q);
    BSON_APPEND_UTF8(&q, "migrationSessionId", session);
    bson_append_document_end(&st, &q);
    if (u != NULL)
        BSON_APPEND_DOCUMENT(&st, "u", u);
    else
        BSON_APPEND_INT32(&st, "limit", 0);
    bson_append_document_end(&arr, &st);
    bson_append_array_end(&cmd, &arr);
    int rc = cfg_write(&cmd, err);
    bson_destroy(&cmd);
    return rc;
}

int mig_task_insert(const mig_spec_t *s, const char *session, const uint8_t *id,
                    const char *donor, const char *donor_host, const char *when,
                    sbl_err_t *err)
{
    uint8_t rid[16];
    if (id == NULL) {
        if (getrandom(rid, sizeof(rid), 0) != (ssize_t)sizeof(rid))
            for (int i = 0; i < 16; i++)
                rid[i] = (uint8_t)rand();
        id = rid;
    }
    bson_t d = BSON_INITIALIZER;
    BSON_APPEND_BINARY(&d, "_id", BSON_SUBTYPE_UUID, id, 16);
    append_range(&d, s);
    BSON_APPEND_UTF8(&d, "migrationSessionId", session);
    BSON_APPEND_UTF8(&d, "donorShardId", donor);
    if (donor_host != NULL)
        BSON_APPEND_UTF8(&d, "donorHost", donor_host);
    BSON_APPEND_UTF8(&d, "whenToClean", when);
    BSON_APPEND_BOOL(&d, "pending", true);
    int rc = insert_doc("rangeDeletions", &d, err);
    bson_destroy(&d);
    return rc;
}

int mig_persist_start(const mig_spec_t *s, const char *session, const char *to,
                      const char *to_host, bool wait_delete, uint8_t id[16], sbl_err_t *err)
{
    if (getrandom(id, 16, 0) != 16)
        for (int i = 0; i < 16; i++)
            id[i] = (uint8_t)rand();
    id[6] = (uint8_t)((id[6] & 0x0f) | 0x40); /* a version 4 UUID */
    id[8] = (uint8_t)((id[8] & 0x3f) | 0x80);
    bson_t d = BSON_INITIALIZER;
    BSON_APPEND_BINARY(&d, "_id", BSON_SUBTYPE_UUID, id, 16);
    BSON_APPEND_UTF8(&d, "migrationSessionId", session);
    append_range(&d, s);
    BSON_APPEND_UTF8(&d, "donorShardId", sbl_shard_name());
    BSON_APPEND_UTF8(&d, "recipientShardId", to);
    BSON_APPEND_UTF8(&d, "recipientHost", to_host);
    int rc = insert_doc("migrationCoordinators", &d, err);
    bson_destroy(&d);
    if (rc == 0)
        rc = mig_task_insert(s, session, id, sbl_shard_name(), NULL,
                             wait_delete ? "now" : "delayed", err);
    return rc;
}

int mig_persist_decision(const char *session, bool committed, sbl_err_t *err)
{
    bson_t u = BSON_INITIALIZER, set;
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
    BSON_APPEND_UTF8(&set, "decision", committed ? "committed" : "aborted");
    bson_append_document_end(&u, &set);
    int rc = session_write("migrationCoordinators", session, &u, err);
    bson_destroy(&u);
    return rc;
}

int mig_coord_delete(const char *session, sbl_err_t *err)
{
    return session_write("migrationCoordinators", session, NULL, err);
}

int mig_task_ready(const char *session, sbl_err_t *err)
{
    bson_t u = BSON_INITIALIZER, un;
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$unset", &un);
    BSON_APPEND_UTF8(&un, "pending", "");
    bson_append_document_end(&u, &un);
    int rc = session_write("rangeDeletions", session, &u, err);
    bson_destroy(&u);
    return rc;
}

int mig_task_delete(const char *session, sbl_err_t *err)
{
    return session_write("rangeDeletions", session, NULL, err);
}

/* Up to max documents of config.<coll> into docs[] (each initialised);
 * returns how many.  Of rangeDeletions, not the background tasks (the
 * range deleter's service runs those: migrate_rangedel.c). */
static int load_docs(const char *coll, bson_t *docs, int max)
{
    bson_t cmd = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&cmd, "find", coll);
    if (strcmp(coll, "rangeDeletions") == 0 && sbl_shard_name() != NULL) {
        bson_t f, or, a, p, e, d; /* {$or: [{pending: {$exists: true}}, {donorShardId: {$ne: me}}]} */
        BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &f);
        BSON_APPEND_ARRAY_BEGIN(&f, "$or", &or);
        BSON_APPEND_DOCUMENT_BEGIN(&or, "0", &a);
        BSON_APPEND_DOCUMENT_BEGIN(&a, "pending", &p);
        BSON_APPEND_BOOL(&p, "$exists", true);
        bson_append_document_end(&a, &p);
        bson_append_document_end(&or, &a);
        BSON_APPEND_DOCUMENT_BEGIN(&or, "1", &e);
        BSON_APPEND_DOCUMENT_BEGIN(&e, "donorShardId", &d);
        BSON_APPEND_UTF8(&d, "$ne", sbl_shard_name());
        bson_append_document_end(&e, &d);
        bson_append_document_end(&or, &e);
        bson_append_array_end(&f, &or);
        bson_append_document_end(&cmd, &f);
    }
    int n = mig_config_docs(&cmd, max, docs);
    bson_destroy(&cmd);
    return n;
}

static bool leftover_ns(char *ns, size_t n);

bool mig_leftovers(void)
{
    char ns[256];
    return leftover_ns(ns, sizeof(ns));
}

int mig_task_spec(const bson_t *d, mig_spec_t *s, sbl_err_t *err)
{
    bson_t r, mn, mx, k, cmd = BSON_INITIALIZER;
    const char *ns = sbl_doc_utf8(d, "nss");
    if (ns == NULL || !mig_doc_of(d, "range", &r) || !mig_doc_of(&r, "min", &mn) ||
        !mig_doc_of(&r, "max", &mx) || !mig_doc_of(d, "keyPattern", &k)) {
        bson_destroy(&cmd);
        return sbl_err_set(err, SBL_E_BadValue, "a migration document without nss, range "
                           "or keyPattern");
    }
    BSON_APPEND_UTF8(&cmd, "ns", ns);
    BSON_APPEND_DOCUMENT(&cmd, "min", &mn);
    BSON_APPEND_DOCUMENT(&cmd, "max", &mx);
    BSON_APPEND_DOCUMENT(&cmd, "shardKeyPattern", &k);
    int rc = mig_spec_parse(&cmd, s, err);
    bson_destroy(&cmd);
    return rc;
}

/* ---- recovery ------------------------------------------------------------ */

static pthread_mutex_t rec_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool pending; /* recovery has work left */
static bool in_crit;        /* under rec_mu: recovery holds the critical section */

bool mig_recovery_pending(void)
{
    return atomic_load(&pending);
}

static void set_pending(bool on)
{
    atomic_store(&pending, on);
    mig_update_active_flag();
}

void mig_recovery_take_crit(const char *ns)
{
    pthread_mutex_lock(&rec_mu);
    in_crit = true;
    pthread_mutex_unlock(&rec_mu);
    set_pending(true);
    mig_log("migration recovery: holding the critical section of %s until the migration's "
            "outcome is known", ns);
}

/* Take ns's critical section for recovery (rec_mu held); false when the
 * routed commands inside did not drain in time (the next pass tries again). */
static bool crit_take(const char *ns)
{
    if (in_crit)
        return true;
    sbl_err_t e = {0};
    if (sbl_shard_crit_enter(ns, sbl_now_us() + 5 * 1000000LL, &e) != 0)
        return false;
    mig_crit_note(ns);
    in_crit = true;
    return true;
}

static void crit_release(void)
{
    if (in_crit) {
        sbl_shard_crit_exit();
        mig_crit_done(NULL);
    }
    in_crit = false;
}

static const char *recip_verb(bool committed)
{
    return committed ? "_recvChunkReleaseCritSec" : "_recvChunkAbort";
}

/* Settle one coordinator document (this shard was the donor); true when it
 * is gone, *localp when this shard's copy of the range is settled. */
static bool settle_coord(const bson_t *d, bool *localp)
{
    const char *session = sbl_doc_utf8(d, "migrationSessionId");
    const char *to = sbl_doc_utf8(d, "recipientShardId");
    const char *to_host = sbl_doc_utf8(d, "recipientHost");
    const char *decision = sbl_doc_utf8(d, "decision");
    mig_spec_t s;
    sbl_err_t e = {0};
    *localp = false;
    if (session == NULL || to == NULL || to_host == NULL || mig_task_spec(d, &s, &e) != 0)
        return false;
    bool committed;
    if (decision != NULL) {
        committed = strcmp(decision, "committed") == 0;
    } else {
        char owner[128];
        mig_chunk_owner(sbl_shard_configsvr(), s.ns, s.min, to, owner, sizeof(owner));
        if (owner[0] == '\0') { /* the config servers cannot say yet */
            mig_spec_free(&s);
            return false;
        }
        committed = strcmp(owner, sbl_shard_name()) != 0;
        mig_log("migration %s: recovering it: the config servers say %s owns the range, so "
                "it %s", session, owner, committed ? "committed" : "aborted");
        if (mig_persist_decision(session, committed, &e) != 0) {
            mig_spec_free(&s);
            return false;
        }
    }
    /* committed: the task becomes the range deleter's (the ownership filter
     * hides the range until it goes); aborted: the range stays here */
    int rc = committed ? mig_task_ready(session, &e) : mig_task_delete(session, &e);
    if (rc == 0) {
        *localp = true;
        if (committed)
            mig_rangedel_kick();
        sbl_shard_refresh(s.ns, &e);
        bson_t reply;
        rc = mig_recip_call(to_host, recip_verb(committed), session, NULL, &reply, &e);
        bson_destroy(&reply);
    }
    if (rc == 0)
        rc = mig_coord_delete(session, &e);
    else
        mig_log("migration %s: recovery will try again: %s", session, e.msg);
    mig_spec_free(&s);
    return rc == 0;
}

/* The decision for a recipient's task of session whose receive no longer
 * runs here: the donor's (it sends it while it runs the migration), else
 * the config servers' owner.  0: decided (*commitp), else not yet. */
static int recip_decision(const bson_t *d, const mig_spec_t *s, bool *commitp)
{
    const char *session = sbl_doc_utf8(d, "migrationSessionId");
    const char *donor_host = sbl_doc_utf8(d, "donorHost");
    bson_t reply;
    sbl_err_t e = {0};
    if (donor_host != NULL &&
        mig_recip_call(donor_host, "_transferMods", session, NULL, &reply, &e) == 0) {
        bson_destroy(&reply); /* the donor runs it: it will say */
        return -1;
    }
    bson_destroy(&reply);
    char owner[128];
    mig_chunk_owner(sbl_shard_configsvr(), s->ns, s->min, sbl_shard_name(), owner,
                    sizeof(owner));
    if (owner[0] == '\0')
        return -1;
    *commitp = strcmp(owner, sbl_shard_name()) == 0;
    return 0;
}

/* Keep (commit) or delete the range of the recipient's task d. */
static int settle_recip_doc(const bson_t *d, const mig_spec_t *s, bool commit, sbl_err_t *err)
{
    const char *session = sbl_doc_utf8(d, "migrationSessionId");
    int rc = 0;
    if (!commit && (rc = mig_task_ready(session, err)) == 0 && mig_delete_range(s, err) < 0)
        rc = -1;
    if (rc == 0) {
        char staging[300];
        bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
        snprintf(staging, sizeof(staging), "migrationStaging.%s", session);
        BSON_APPEND_UTF8(&cmd, "drop", staging);
        sbl_cmd_run("config", &cmd, &reply);
        bson_destroy(&reply);
        bson_destroy(&cmd);
        rc = mig_task_delete(session, err);
    }
    if (rc == 0) {
        sbl_err_t e = {0};
        sbl_shard_refresh(s->ns, &e);
        mig_log("migration %s: this recipient %s the range after a restart", session,
                commit ? "keeps" : "deleted its copy of");
    }
    return rc;
}

int mig_recip_settle_task(const char *session, bool commit, sbl_err_t *err)
{
    if (sbl_shard_name() == NULL) /* a new primary before it read its shardIdentity */
        return sbl_err_set(err, SBL_E_NotYetInitialized, "this member does not know its "
                           "shard's name yet; ask again");
    bson_t docs[MAX_DOCS];
    int n = load_docs("rangeDeletions", docs, MAX_DOCS), rc = 0;
    pthread_mutex_lock(&rec_mu);
    for (int i = 0; i < n && rc == 0; i++) {
        const char *sid = sbl_doc_utf8(&docs[i], "migrationSessionId");
        const char *donor = sbl_doc_utf8(&docs[i], "donorShardId");
        mig_spec_t s;
        if (sid == NULL || strcmp(sid, session) != 0 || donor == NULL ||
            strcmp(donor, sbl_shard_name()) == 0 || mig_task_spec(&docs[i], &s, err) != 0)
            continue;
        rc = settle_recip_doc(&docs[i], &s, commit, err);
        mig_spec_free(&s);
    }
    pthread_mutex_unlock(&rec_mu);
    mig_free_docs(docs, n);
    return rc;
}

/* Settle one range deletion task whose migration no longer runs here;
 * true when it is gone. */
static bool settle_task(const bson_t *d)
{
    const char *session = sbl_doc_utf8(d, "migrationSessionId");
    const char *donor = sbl_doc_utf8(d, "donorShardId");
    mig_spec_t s;
    sbl_err_t e = {0};
    if (session == NULL || donor == NULL || mig_task_spec(d, &s, &e) != 0)
        return false;
    bool keep = false;
    int rc = 0;
    if (strcmp(donor, sbl_shard_name()) == 0) { /* the donor's, its coordinator gone */
        char owner[128];
        /* decided before its coordinator document went: as it stands */
        mig_chunk_owner(sbl_shard_configsvr(), s.ns, s.min, NULL, owner, sizeof(owner));
        if (owner[0] == '\0')
            rc = -1;
        keep = strcmp(owner, sbl_shard_name()) == 0;
        if (rc == 0) /* given away: the range deleter's task from now on */
            rc = keep ? mig_task_delete(session, &e) : mig_task_ready(session, &e);
        if (rc == 0 && !keep)
            mig_rangedel_kick();
    } else if ((rc = recip_decision(d, &s, &keep)) == 0) {
        rc = settle_recip_doc(d, &s, keep, &e);
    }
    mig_spec_free(&s);
    return rc == 0;
}

/* Is d's migration the one this process runs now (its own flow ends it)? */
static bool live(const bson_t *d)
{
    const char *session = sbl_doc_utf8(d, "migrationSessionId");
    char a[160], b[160];
    mig_donor_session(a, sizeof(a));
    mig_recip_session(b, sizeof(b));
    return session != NULL && (strcmp(session, a) == 0 || strcmp(session, b) == 0);
}

/* One pass over both collections (rec_mu held).  Returns true when work
 * is left for a later pass. */
static bool recover_pass(void)
{
    bson_t coords[MAX_DOCS], tasks[MAX_DOCS];
    int nc = load_docs("migrationCoordinators", coords, MAX_DOCS);
    int nt = load_docs("rangeDeletions", tasks, MAX_DOCS);
    bool left = false, local_left = false;
    const char *ns = NULL;
    for (int i = 0; i < nc && ns == NULL; i++)
        if (!live(&coords[i]))
            ns = sbl_doc_utf8(&coords[i], "nss");
    for (int i = 0; i < nt && ns == NULL; i++)
        if (!live(&tasks[i]))
            ns = sbl_doc_utf8(&tasks[i], "nss");
    if (ns != NULL && !mig_donor_active() && !mig_recip_active() && crit_take(ns)) {
        for (int i = 0; i < nc; i++) {
            bool local = false;
            if (live(&coords[i]))
                continue;
            if (!settle_coord(&coords[i], &local))
                left = true;
            if (!local)
                local_left = true;
        }
        mig_free_docs(tasks, nt);
        nt = load_docs("rangeDeletions", tasks, MAX_DOCS); /* settle_coord took its own */
        for (int i = 0; i < nt; i++)
            if (!live(&tasks[i]) && !settle_task(&tasks[i]))
                left = local_left = true;
    } else if (ns != NULL) {
        left = local_left = true;
    }
    if (!local_left && in_crit && !mig_donor_active() && !mig_recip_active()) {
        /* this shard's copies are settled: routed commands go on, once what
         * was deleted is gone for majority reads too (migrate.c) */
        sbl_err_t e = {0};
        if (mig_await_majority(MIG_CRIT_MS, "settling a migration's range", &e) != 0)
            mig_log("migration recovery: %s (majority reads may still see it)", e.msg);
        crit_release();
    }
    mig_free_docs(coords, nc);
    mig_free_docs(tasks, nt);
    return left;
}

/* The collection of the first document a migration left here, into ns;
 * false when there is none. */
static bool leftover_ns(char *ns, size_t n)
{
    bson_t docs[1];
    int nd = load_docs("migrationCoordinators", docs, 1);
    if (nd == 0)
        nd = load_docs("rangeDeletions", docs, 1);
    const char *s = nd > 0 ? sbl_doc_utf8(&docs[0], "nss") : NULL;
    bool found = s != NULL;
    if (found)
        snprintf(ns, n, "%s", s);
    mig_free_docs(docs, nd);
    return found;
}

/* A new primaryship: before any routed command runs here (the door of
 * sbl_shard_stepped_up), hold the critical section of the collection an
 * unfinished migration left, so no routed write lands in a range whose
 * owner recovery has yet to decide, and forget the versions cached in an
 * earlier primaryship (a migration this member donated may have committed
 * since: mongod's filtering metadata is UNKNOWN after a step-up). */
static void open_after_step_up(void)
{
    int64_t term = sbl_repl_write_term();
    if (term < 0 || sbl_shard_name() == NULL || sbl_shard_metadata_known())
        return;
    char ns[256];
    pthread_mutex_lock(&rec_mu);
    /* a migration still running here (from before a step-down) keeps its
     * own critical section and hands it to recovery when it ends */
    bool left = !mig_donor_active() && !mig_recip_active() && leftover_ns(ns, sizeof(ns));
    bool held = !left || crit_take(ns);
    pthread_mutex_unlock(&rec_mu);
    if (!held) /* routed commands of an earlier primaryship still inside: next tick */
        return;
    if (left)
        set_pending(true);
    sbl_shard_stepped_up(term);
    mig_log("migration recovery: primary in term %lld: routed commands refresh their "
            "collection's version first%s%s", (long long)term, left ? "; held until recovery "
            "settles " : "", left ? ns : "");
}

static pthread_t rec_thread;
static bool rec_running;

static void *recover_main(void *arg)
{
    (void)arg;
    sbl_thread_name("migrecovery");
    bool was_primary = false, was_writable = false;
    for (unsigned step = 0, tick = 0; !atomic_load(&stopping); step++) {
        usleep(50 * 1000);
        /* a member that replicated the shardIdentity document (only its primary heard
         * addShard) takes it in, secondaries too, as mongod does when it applies the
         * insert: at once after an election, else every 250 ms */
        bool writable = sbl_repl_writable();
        if (sbl_shard_name() == NULL && ((writable && !was_writable) || step % 5 == 0))
            sbl_cmd_shard_identity_load();
        was_writable = writable;
        /* tests: this member's recovery (and a secondary's mirroring) waits */
        if (atomic_load(&fp_on[MIG_FP_RECOVERY]))
            continue;
        open_after_step_up(); /* a step-up is looked at every 50 ms */
        if (step % 5 != 0)
            continue;
        tick++; /* the rest every 250 ms */
        bool primary = sbl_repl_writable() && sbl_shard_name() != NULL;
        if (primary && (!was_primary || atomic_load(&pending))) {
            pthread_mutex_lock(&rec_mu);
            bool left = recover_pass() || in_crit;
            pthread_mutex_unlock(&rec_mu);
            set_pending(left);
        } else if (!primary && tick % 4 == 0 && !mig_donor_active() && !mig_recip_active()) {
            /* a secondary mirrors what migrations left (routed commands go
             * to primaries only, so this costs nothing): with documents it
             * holds their collection's critical section, so once elected it
             * serves no routed command before its recovery ran */
            char ns[256];
            pthread_mutex_lock(&rec_mu);
            if (leftover_ns(ns, sizeof(ns)))
                crit_take(ns);
            else
                crit_release();
            bool held = in_crit;
            pthread_mutex_unlock(&rec_mu);
            set_pending(held);
        }
        was_primary = primary;
    }
    sbl_session_release_thread();
    return NULL;
}

void sbl_cmd_mig_recovery_start(void)
{
    if (rec_running || sbl_server_options()->cluster_role != SBL_ROLE_SHARDSVR)
        return;
    /* before any routed command can come in: documents left by a
     * migration hold their collection's critical section from the start */
    char ns[256];
    if (leftover_ns(ns, sizeof(ns))) {
        pthread_mutex_lock(&rec_mu);
        if (crit_take(ns))
            mig_log("migration recovery: %s's critical section is held until an unfinished "
                    "migration is settled", ns);
        pthread_mutex_unlock(&rec_mu);
        set_pending(true);
    }
    atomic_store(&stopping, false);
    if (pthread_create(&rec_thread, NULL, recover_main, NULL) == 0)
        rec_running = true;
    mig_rangedel_start();
}

void sbl_cmd_mig_recovery_stop(void)
{
    atomic_store(&stopping, true);
    mig_rangedel_stop();
    if (!rec_running)
        return;
    pthread_join(rec_thread, NULL);
    rec_running = false;
}

/* A live migration that left documents behind (the recipient did not hear
 * the decision, or the outcome is unknown): recovery takes them up. */
void mig_recovery_kick(void)
{
    set_pending(true);
}
