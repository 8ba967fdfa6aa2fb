/*
 * migrate_recv.c: the recipient's half of a chunk migration (migrate.c
 * describes the whole): _recvChunkStart starts a thread that pulls the
 * range from the donor (_migrateClone) into a staging collection of its
 * own (config.migrationStaging.<session>) and then the range's changes
 * (_transferMods) until there are none ("steady"); _recvChunkCommit, sent
 * by the donor from its critical section, takes the last changes, enters
 * this shard's critical section for ns and moves the staged documents in;
 * _recvChunkReleaseCritSec (after the config servers committed) refreshes
 * the version and leaves it; _recvChunkAbort takes back out what was moved.
 * A donor that dies (or cannot reach us) after our commit sends neither: a
 * watchdog then settles the critical section from the config servers.
 */
#include "cmd/failpoint.h"
#include "cmd/migrate_int.h"
#include "doc/doc.h"
#include "repl/repl.h"

#include "server/server.h"
#include "shard/shard.h"
#include "common/clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ======================= recipient ======================= */

static pthread_mutex_t recip_mu = PTHREAD_MUTEX_INITIALIZER;
/* One of _recvChunkStart / Commit / ReleaseCritSec / Abort at a time: an
 * abort sent after a commit the donor gave up on waits for that commit (it
 * ends by its own deadline) instead of racing it. */
static pthread_mutex_t recip_cmd_mu = PTHREAD_MUTEX_INITIALIZER;
static bool recip_shutting_down; /* under recip_cmd_mu: the watchdog stands down */
static struct {
    bool active;
    char session[160];
    mig_spec_t spec;
    char from[1024];
    char staging[300]; /* collection name in config */
    const char *state; /* clone, catchup, steady, commit, done, fail */
    char errmsg[512];
    int64_t cloned, mods;
    atomic_bool stop;
    bool thread_running, in_cs, moved;
    pthread_t th;
} recip;

bool mig_recip_active(void)
{
    return recip.active;
}

void mig_recip_session(char *out, size_t n)
{
    pthread_mutex_lock(&recip_mu);
    snprintf(out, n, "%s", recip.active ? recip.session : "");
    pthread_mutex_unlock(&recip_mu);
}

static void recip_fail(const sbl_err_t *e)
{
    pthread_mutex_lock(&recip_mu);
    recip.state = "fail";
    snprintf(recip.errmsg, sizeof(recip.errmsg), "%s", e->msg);
    pthread_mutex_unlock(&recip_mu);
}

/* One _transferMods round applied to the staging collection: *changedp
 * documents changed (reloaded, or deleted that were staged: the donor may
 * name _ids the range never had), *morep when the donor has more to read. */
static int recip_apply_mods(int64_t *changedp, bool *morep, sbl_err_t *err)
{
    bson_t reply;
    int rc = mig_recip_call(recip.from, "_transferMods", recip.session, NULL, &reply, err);
    bson_iter_t it, a;
    int64_t n = 0;
    if (rc == 0 && bson_iter_init_find(&it, &reply, "reload") && bson_iter_recurse(&it, &a)) {
        rc = mig_upsert_docs("config", recip.staging, &a, &n, err);
        recip.mods += n;
    }
    if (rc == 0 && bson_iter_init_find(&it, &reply, "deleted") && bson_iter_recurse(&it, &a))
        rc = mig_delete_ids("config", recip.staging, &a, &n, err);
    *changedp = n;
    *morep = rc == 0 && bson_iter_init_find(&it, &reply, "more") && bson_iter_as_bool(&it);
    bson_destroy(&reply);
    return rc;
}

/* u as 8-4-4-4-12 hex digits (out: 37 bytes). */
static void uuid_str(const uint8_t u[16], char out[37])
{
    char *p = out;
    for (int i = 0; i < 16; i++) {
        p += sprintf(p, "%02x", u[i]);
        if (i == 3 || i == 5 || i == 7 || i == 9)
            *p++ = '-';
    }
    *p = '\0';
}

/* The UUID listCollections reports for db.coll (on the donor when from is set, else
 * here) into uuid[16]; 0 with *found false when there is no such collection. */
static int coll_uuid(const char *from, const char *db, const char *coll, uint8_t uuid[16],
                     bool *found, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, f, reply;
    BSON_APPEND_INT32(&cmd, "listCollections", 1);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &f);
    BSON_APPEND_UTF8(&f, "name", coll);
    bson_append_document_end(&cmd, &f);
    int rc = from != NULL ? sbl_shard_remote_check_within(from, db, &cmd, MIG_CALL_MS, &reply, err)
                          : sbl_cmd_run_checked(db, &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc != 0)
        return rc;
    bson_iter_t it, u;
    bson_subtype_t st;
    uint32_t len = 0;
    const uint8_t *data = NULL;
    *found = bson_iter_init(&it, &reply) &&
             bson_iter_find_descendant(&it, "cursor.firstBatch.0.info.uuid", &u) &&
             BSON_ITER_HOLDS_BINARY(&u);
    if (*found)
        bson_iter_binary(&u, &st, &len, &data);
    if (*found && len == 16)
        memcpy(uuid, data, 16);
    else
        *found = false;
    bson_destroy(&reply);
    return 0;
}

/* The recipient's copy of ns has the donor's UUID, as in mongod: created with it when
 * missing (applyOps' create with ui, so the oplog entry names it too), and a copy of
 * another incarnation (another UUID) refuses the migration. */
static int recip_create_like_donor(const char *db, const char *coll, sbl_err_t *err)
{
    uint8_t donor[16], mine[16];
    bool on_donor = false, here = false;
    SBL_RET(coll_uuid(recip.from, db, coll, donor, &on_donor, err));
    if (!on_donor)
        return 0; /* a view or a dropped collection: the clone finds out */
    SBL_RET(coll_uuid(NULL, db, coll, mine, &here, err));
    if (here && memcmp(mine, donor, 16) == 0)
        return 0;
    if (here) {
        char a[37], b[37];
        uuid_str(mine, a);
        uuid_str(donor, b);
        return sbl_err_set(err, SBL_E_InvalidUUID, "Cannot create collection %s because we "
                           "already have an identically named collection with UUID %s, which "
                           "differs from the donor's UUID %s. Manually drop the collection on "
                           "this shard if it contains data from a previous incarnation of %s",
                           recip.spec.ns, a, b, recip.spec.ns);
    }
    bson_t cmd = BSON_INITIALIZER, reply;
    sbl_shard_create_with_uuid_cmd(&cmd, db, coll, donor);
    sbl_err_t e = {0};
    int rc = sbl_cmd_run_checked("admin", &cmd, &reply, &e);
    bson_destroy(&reply);
    bson_destroy(&cmd);
    if (rc != 0 && e.code != SBL_E_NamespaceExists) /* a racing create: checked next round */
        return sbl_err_set(err, e.code, "%s", e.msg);
    return 0;
}

/* The recipient's copy of the donor's indexes on ns (the collection is
 * created when missing). */
static int recip_copy_indexes(sbl_err_t *err)
{
    char db[256];
    const char *coll;
    mig_split_ns(recip.spec.ns, db, sizeof(db), &coll);
    SBL_RET(recip_create_like_donor(db, coll, err));
    bson_t cmd = BSON_INITIALIZER, reply;
    BSON_APPEND_UTF8(&cmd, "listIndexes", coll);
    int rc = sbl_shard_remote_check_within(recip.from, db, &cmd, MIG_CALL_MS, &reply, err);
    bson_destroy(&cmd);
    if (rc != 0)
        return rc;
    bson_t ci = BSON_INITIALIZER, idx, r2;
    BSON_APPEND_UTF8(&ci, "createIndexes", coll);
    BSON_APPEND_ARRAY_BEGIN(&ci, "indexes", &idx);
    uint32_t n = 0;
    char kb[16];
    bson_iter_t it, b;
    if (bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.firstBatch", &b) &&
        bson_iter_recurse(&b, &it))
        while (bson_iter_next(&it)) {
            bson_t d;
            const char *name;
            if (!sbl_iter_doc(&it, &d) || (name = sbl_doc_utf8(&d, "name")) == NULL ||
                strcmp(name, "_id_") == 0)
                continue;
            bson_t spec;
            const char *k832 = mig_akey(n++, kb);
            BSON_APPEND_DOCUMENT_BEGIN(&idx, k832, &spec);
            bson_copy_to_excluding_noinit(&d, &spec, "v", "ns", NULL);
            bson_append_document_end(&idx, &spec);
        }
    bson_append_array_end(&ci, &idx);
    bson_destroy(&reply);
    if (n == 0) { /* just make sure the collection exists */
        bson_t cr = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&cr, "create", coll);
        sbl_err_t e = {0};
        if (sbl_cmd_run_checked(db, &cr, &r2, &e) != 0 && e.code != SBL_E_NamespaceExists)
            rc = sbl_err_set(err, e.code, "%s", e.msg);
        bson_destroy(&r2);
        bson_destroy(&cr);
    } else {
        rc = sbl_cmd_run_checked(db, &ci, &r2, err);
        bson_destroy(&r2);
    }
    bson_destroy(&ci);
    return rc;
}

static void *recip_thread(void *arg)
{
    (void)arg;
    sbl_err_t e = {0};
    int rc = recip_copy_indexes(&e);
    bson_t cmd = BSON_INITIALIZER, reply;
    BSON_APPEND_UTF8(&cmd, "drop", recip.staging);
    bson_init(&reply);
    sbl_cmd_run("config", &cmd, &reply);
    bson_destroy(&reply);
    bson_destroy(&cmd);
    /* a range this shard gave away earlier must be gone first (mongod's
     * recipient waits for overlapping range deletions too), else the range
     * deleter would delete it under its new owner */
    if (rc == 0)
        rc = mig_rangedel_await_overlap(&recip.spec, &recip.stop, &e);
    /* clone */
    if (rc == 0)
        mig_fp_hold(MIG_FP_RECV1);
    bool first_batch = true;
    while (rc == 0 && !recip.stop) {
        rc = mig_recip_call(recip.from, "_migrateClone", recip.session, NULL, &reply, &e);
        bson_iter_t it, a;
        bool any = false;
        if (rc == 0 && bson_iter_init_find(&it, &reply, "objects") && bson_iter_recurse(&it, &a)) {
            bson_t ins = BSON_INITIALIZER, docs, r2;
            BSON_APPEND_UTF8(&ins, "insert", recip.staging);
            BSON_APPEND_ARRAY_BEGIN(&ins, "documents", &docs);
            uint32_t n = 0;
            char kb[16];
            while (bson_iter_next(&a)) {
                bson_t d;
                if (sbl_iter_doc(&a, &d)) {
                    const char *k879 = mig_akey(n++, kb);
                    BSON_APPEND_DOCUMENT(&docs, k879, &d);
                }
            }
            bson_append_array_end(&ins, &docs);
            if (n > 0) {
                any = true;
                rc = sbl_cmd_run_checked("config", &ins, &r2, &e);
                bson_destroy(&r2);
                pthread_mutex_lock(&recip_mu);
                recip.cloned += n;
                pthread_mutex_unlock(&recip_mu);
            }
            bson_destroy(&ins);
        }
        bson_destroy(&reply);
        if (rc == 0 && any && first_batch)
            mig_fp_hold(MIG_FP_RECV2);
        first_batch = false;
        if (!any)
            break;
    }
    if (rc == 0) {
        pthread_mutex_lock(&recip_mu);
        recip.state = "catchup";
        pthread_mutex_unlock(&recip_mu);
    }
    /* catch up until told to commit: "steady" once a round leaves little
     * behind (the donor's critical section takes the rest) */
    while (rc == 0 && !recip.stop) {
        int64_t changed;
        bool more;
        rc = recip_apply_mods(&changed, &more, &e);
        if (rc == 0 && !more && changed < MIG_STEADY_DOCS) {
            pthread_mutex_lock(&recip_mu);
            recip.state = "steady";
            pthread_mutex_unlock(&recip_mu);
        }
        if (rc == 0 && !more && changed == 0)
            usleep(20 * 1000);
    }
    if (rc != 0)
        recip_fail(&e);
    sbl_session_release_thread();
    return NULL;
}

static void recip_join(void);
static void crit_watch_start(void);
static void recip_drop_staging(void);
static void recip_end(void);

/* Run one of the recipient's commands under recip_cmd_mu. */
static int serialized(int (*fn)(sbl_opctx_t *, sbl_err_t *), sbl_opctx_t *ctx, sbl_err_t *err)
{
    pthread_mutex_lock(&recip_cmd_mu);
    int rc = fn(ctx, err);
    pthread_mutex_unlock(&recip_cmd_mu);
    return rc;
}

static int recv_start(sbl_opctx_t *ctx, sbl_err_t *err)
{
    if (sbl_server_options()->cluster_role != SBL_ROLE_SHARDSVR)
        return sbl_err_set(err, SBL_E_IllegalOperation, "not a shard");
    const char *session = sbl_doc_utf8(ctx->cmd, "sessionId"), *from = sbl_doc_utf8(ctx->cmd, "from");
    if (session == NULL || from == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "_recvChunkStart needs sessionId and from");
    mig_spec_t spec;
    int rc = mig_spec_parse(ctx->cmd, &spec, err);
    if (rc != 0)
        return rc;
    /* a receive whose donor went away (failed, never aborted) is over */
    if (recip.active && recip.state != NULL && strcmp(recip.state, "fail") == 0 &&
        !recip.in_cs) {
        mig_log("migration %s: dropping a failed receive (%s)", recip.session, recip.errmsg);
        recip_join();
        recip_drop_staging();
        sbl_err_t e = {0};
        mig_task_delete(recip.session, &e); /* nothing of it reached the collection */
        recip_end();
    }
    if (recip.active || mig_donor_active() || mig_recovery_pending() || mig_leftovers()) {
        mig_spec_free(&spec);
        return sbl_err_set(err, SBL_E_ConflictingOperationInProgress, "a migration is already "
                           "running on this shard, or an earlier one is being recovered");
    }
    /* the range deletion task first: a restart finds what to clean up */
    bson_iter_t idit;
    uint32_t idlen = 0;
    const uint8_t *id = NULL;
    if (bson_iter_init_find(&idit, ctx->cmd, "migrationId") && BSON_ITER_HOLDS_BINARY(&idit))
        bson_iter_binary(&idit, NULL, &idlen, &id);
    const char *donor = sbl_doc_utf8(ctx->cmd, "fromShardName");
    rc = mig_task_insert(&spec, session, idlen == 16 ? id : NULL, donor ? donor : "", from,
                         "now", err);
    if (rc != 0) {
        mig_spec_free(&spec);
        return rc;
    }
    pthread_mutex_lock(&recip_mu);
    memset(&recip, 0, sizeof(recip));
    recip.active = true;
    recip.spec = spec;
    snprintf(recip.session, sizeof(recip.session), "%s", session);
    snprintf(recip.from, sizeof(recip.from), "%s", from);
    snprintf(recip.staging, sizeof(recip.staging), "migrationStaging.%s", session);
    recip.state = "clone";
    mig_update_active_flag();
    if (pthread_create(&recip.th, NULL, recip_thread, NULL) != 0) {
        mig_spec_free(&recip.spec);
        recip.active = false;
        mig_update_active_flag();
        pthread_mutex_unlock(&recip_mu);
        return sbl_err_set(err, SBL_E_InternalError, "cannot start the migration thread");
    }
    recip.thread_running = true;
    pthread_mutex_unlock(&recip_mu);
    BSON_APPEND_BOOL(ctx->reply, "started", true);
    return 0;
}

int sbl_cmd_recv_chunk_start(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return serialized(recv_start, ctx, err);
}

int sbl_cmd_recv_chunk_status(sbl_opctx_t *ctx, sbl_err_t *err)
{
    pthread_mutex_lock(&recip_mu);
    BSON_APPEND_BOOL(ctx->reply, "active", recip.active);
    if (recip.active) {
        BSON_APPEND_UTF8(ctx->reply, "sessionId", recip.session);
        BSON_APPEND_UTF8(ctx->reply, "ns", recip.spec.ns);
        BSON_APPEND_UTF8(ctx->reply, "from", recip.from);
        BSON_APPEND_UTF8(ctx->reply, "state", recip.state);
        if (recip.errmsg[0])
            BSON_APPEND_UTF8(ctx->reply, "errmsg", recip.errmsg);
        bson_t c;
        BSON_APPEND_DOCUMENT_BEGIN(ctx->reply, "counts", &c);
        BSON_APPEND_INT64(&c, "cloned", recip.cloned);
        BSON_APPEND_INT64(&c, "catchup", recip.mods);
        bson_append_document_end(ctx->reply, &c);
    }
    pthread_mutex_unlock(&recip_mu);
    (void)err;
    return 0;
}

static void recip_join(void)
{
    if (recip.thread_running) {
        recip.stop = true;
        pthread_join(recip.th, NULL);
        recip.thread_running = false;
    }
}

/* Each batch of the staged documents (with ids_only, their _ids alone)
 * handed to fn (mig_upsert_docs, mig_delete_ids) for the collection, its
 * writes marked fromMigrate; deadline (sbl_now_us's clock; 0: none) bounds
 * the batches after the first.  Batch after batch: even a chunk's _ids
 * alone can fill more than one 16 MB reply. */
static int staging_each(bool ids_only, int64_t deadline,
                        int (*fn)(const char *db, const char *coll, bson_iter_t *arr, int64_t *np,
                                  sbl_err_t *err),
                        sbl_err_t *err)
{
    char db[256];
    const char *coll;
    mig_split_ns(recip.spec.ns, db, sizeof(db), &coll);
    int64_t cursor = 0;
    bool first = true;
    int rc = 0;
    while (rc == 0 && (first || cursor != 0)) {
        if (!first && deadline != 0 && sbl_now_us() > deadline) {
            rc = sbl_err_set(err, SBL_E_ExceededTimeLimit,
                             "moving the range in did not finish within %d ms", MIG_CRIT_MS);
            break;
        }
        bson_t cmd = BSON_INITIALIZER, reply, proj;
        if (first) {
            BSON_APPEND_UTF8(&cmd, "find", recip.staging);
            if (ids_only) {
                BSON_APPEND_DOCUMENT_BEGIN(&cmd, "projection", &proj);
                BSON_APPEND_INT32(&proj, "_id", 1);
                bson_append_document_end(&cmd, &proj);
            }
        } else {
            BSON_APPEND_INT64(&cmd, "getMore", cursor);
            BSON_APPEND_UTF8(&cmd, "collection", recip.staging);
        }
        BSON_APPEND_INT32(&cmd, "batchSize", ids_only ? 10000 : 500);
        rc = sbl_cmd_run_checked("config", &cmd, &reply, err);
        bson_destroy(&cmd);
        bson_iter_t it;
        cursor = 0;
        if (rc == 0 && mig_reply_batch(&reply, &cursor, &it)) {
            sbl_repl_from_migrate = true;
            rc = fn(db, coll, &it, NULL, err);
            sbl_repl_from_migrate = false;
        }
        first = false;
        bson_destroy(&reply);
    }
    if (rc != 0)
        mig_kill_cursor("config", recip.staging, cursor);
    return rc;
}

/* Move the staged documents into the collection (in the critical section,
 * which must end by deadline, sbl_now_us's clock). */
static int recip_move_in(int64_t deadline, sbl_err_t *err)
{
    return staging_each(false, deadline, mig_upsert_docs, err);
}

/* The range moved in (and the sessions' history) is in the journal and on
 * a majority before the donor may commit and delete its copy: a recipient
 * that dies after answering must still have it when it comes back. */
static int recip_durable(int64_t deadline, sbl_err_t *err)
{
    SBL_RET(sbl_storage_flush(err));
    int64_t left_ms = (deadline - sbl_now_us()) / 1000;
    return mig_await_majority(left_ms > 0 ? left_ms : 1, "the range moved in did not reach a "
                              "majority of the recipient's members in time", err);
}

static void *drop_main(void *arg)
{
    char *name = arg;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&cmd, "drop", name);
    sbl_cmd_run("config", &cmd, &reply);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    free(name);
    sbl_session_release_thread();
    return NULL;
}

/* Run fn(arg) on a detached thread; false when none could start. */
static bool start_detached(void *(*fn)(void *), void *arg)
{
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    bool ok = pthread_create(&th, &at, fn, arg) == 0;
    pthread_attr_destroy(&at);
    return ok;
}

/* Drop the staging collection on a thread of its own: a WiredTiger drop
 * can take a second, and nothing waits for it (each migration stages
 * under its own name). */
static void recip_drop_staging(void)
{
    char *name = strdup(recip.staging);
    if (name != NULL && !start_detached(drop_main, name))
        drop_main(name);
}

static void recip_end(void)
{
    if (recip.in_cs) {
        sbl_shard_crit_exit();
        mig_crit_done(recip.spec.ns);
    }
    pthread_mutex_lock(&recip_mu);
    mig_spec_free(&recip.spec);
    memset(&recip, 0, sizeof(recip));
    mig_update_active_flag();
    pthread_mutex_unlock(&recip_mu);
}

static int recv_commit(sbl_opctx_t *ctx, sbl_err_t *err)
{
    if (!recip.active)
        return sbl_err_set(err, SBL_E_ConflictingOperationInProgress, "no migration to commit");
    int rc = mig_check_session(ctx->cmd, recip.session, err);
    if (rc != 0)
        return rc;
    int64_t deadline = sbl_now_us() + (int64_t)MIG_CRIT_MS * 1000;
    recip_join();
    if (strcmp(recip.state, "fail") == 0)
        return sbl_err_set(err, SBL_E_OperationFailed, "the migration failed: %s", recip.errmsg);
    /* the donor is in its critical section: its last changes, until none */
    for (;;) {
        int64_t changed;
        bool more;
        if ((rc = recip_apply_mods(&changed, &more, err)) != 0 || (!more && changed == 0))
            break;
        if (sbl_now_us() > deadline) {
            rc = sbl_err_set(err, SBL_E_ExceededTimeLimit, "the recipient did not take the "
                             "range's last changes within %d ms", MIG_CRIT_MS);
            break;
        }
    }
    /* the range's retryable-write history, complete now that the donor's
     * routed writes have stopped */
    if (rc == 0)
        rc = mig_recip_sessions(ctx->ss, recip.from, recip.session, err);
    if (rc == 0) {
        recip.state = "commit";
        mig_crit_note(recip.spec.ns); /* before the range moves in: snapshot_read.c */
        rc = sbl_shard_crit_enter(recip.spec.ns, deadline, err);
    }
    if (rc == 0) {
        recip.in_cs = true;
        recip.moved = true; /* from here an abort deletes what was moved in */
        rc = recip_move_in(deadline, err);
    }
    if (rc == 0)
        rc = recip_durable(deadline, err);
    if (rc != 0) {
        recip_fail(err);
        return rc;
    }
    crit_watch_start();
    BSON_APPEND_INT64(ctx->reply, "cloned", recip.cloned);
    BSON_APPEND_INT64(ctx->reply, "catchup", recip.mods);
    return 0;
}

int sbl_cmd_recv_chunk_commit(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return serialized(recv_commit, ctx, err);
}

/* The commit happened: keep the range, re-read the version, leave. */
static void recip_release(void)
{
    sbl_err_t e = {0};
    sbl_shard_refresh(recip.spec.ns, &e);
    if (recip.in_cs) {
        sbl_shard_crit_exit();
        mig_crit_done(recip.spec.ns);
    }
    recip.in_cs = false;
    recip_drop_staging();
    if (mig_task_delete(recip.session, &e) != 0)
        mig_log("migration %s: removing the range deletion task failed: %s", recip.session,
                e.msg);
    recip_end();
}

/* settle() the receive ctx's sessionId names; when none runs (this member
 * restarted), its range deletion task: commit keeps the range, else it goes. */
static int settle_session(sbl_opctx_t *ctx, void (*settle)(void), bool commit, sbl_err_t *err)
{
    const char *session = sbl_doc_utf8(ctx->cmd, "sessionId");
    if (!recip.active)
        return session != NULL ? mig_recip_settle_task(session, commit, err) : 0;
    int rc = mig_check_session(ctx->cmd, recip.session, err);
    if (rc == 0)
        settle();
    return rc;
}

static int recv_release(sbl_opctx_t *ctx, sbl_err_t *err)
{
    /* the commit's validAfter (the donor passes it on): this shard's window
     * of the migration closes after it (mig_crit_done) */
    bson_iter_t it;
    if (bson_iter_init_find(&it, ctx->cmd, "validAfter") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        uint32_t t, i;
        bson_iter_timestamp(&it, &t, &i);
        sbl_repl_clock_advance(((uint64_t)t << 32) | i);
    }
    return settle_session(ctx, recip_release, true, err);
}

int sbl_cmd_recv_chunk_release(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return serialized(recv_release, ctx, err);
}

/* No commit: take back out what was moved in, drop the staging, leave.
 * When taking back fails, the range deletion task (ready) stays: the range
 * deleter then deletes the range. */
static void recip_abort(void)
{
    recip_join();
    int rc = 0;
    sbl_err_t e = {0};
    if (recip.moved) { /* take back out what was moved in: the staged _ids */
        mig_task_ready(recip.session, &e);
        rc = staging_each(true, 0, mig_delete_ids, &e);
        if (rc != 0)
            mig_log("migration %s: taking the range back out: %s (left to the range deleter)",
                    recip.session, e.msg);
        /* gone for majority reads too before the critical section ends (migrate.c) */
        else if (mig_await_majority(MIG_CRIT_MS, "taking the range back out", &e) != 0)
            mig_log("migration %s: %s (majority reads may still see it)", recip.session, e.msg);
    }
    recip_drop_staging();
    sbl_err_clear(&e);
    sbl_shard_refresh(recip.spec.ns, &e);
    if (rc == 0 && mig_task_delete(recip.session, &e) != 0)
        mig_log("migration %s: removing the range deletion task failed: %s", recip.session,
                e.msg);
    recip_end();
}

static int recv_abort(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return settle_session(ctx, recip_abort, false, err);
}

/* MIG_RELEASE_MS, or with test commands on, setParameter
 * sableMigrationReleaseWaitMS (tests/integration/py/test_migration.py). */
static int64_t release_wait_ms(void)
{
    bson_iter_t it;
    if (sbl_test_commands_enabled() &&
        bson_iter_init_find(&it, &sbl_server_options()->parameters,
                            "sableMigrationReleaseWaitMS") &&
        BSON_ITER_HOLDS_UTF8(&it))
        return atoll(bson_iter_utf8(&it, NULL));
    return MIG_RELEASE_MS;
}

/* Settle session's critical section when the donor has neither released
 * nor aborted it MIG_RELEASE_MS after our commit and no longer runs the
 * migration (its _transferMods refuses the session, or it is unreachable):
 * the config servers' owner of the chunk decides (us: release; the donor:
 * abort); when they cannot say, ask again later. */
static void *crit_watch(void *arg)
{
    char *session = arg;
    int64_t since = mig_now_ms(), wait_ms = release_wait_ms();
    for (;;) {
        usleep(500 * 1000);
        pthread_mutex_lock(&recip_cmd_mu);
        bool mine = !recip_shutting_down && recip.active && recip.in_cs &&
                    strcmp(recip.session, session) == 0;
        if (mine && mig_now_ms() - since > wait_ms) {
            bson_t reply;
            sbl_err_t e = {0};
            int rc = mig_recip_call(recip.from, "_transferMods", session, NULL, &reply, &e);
            bson_destroy(&reply);
            char owner[128] = "";
            if (rc != 0) /* the donor is done with it (or gone): ask the config servers */
                mig_chunk_owner(sbl_shard_configsvr(), recip.spec.ns, recip.spec.min,
                                sbl_shard_name(), owner, sizeof(owner));
            if (owner[0] != '\0') {
                mig_log("migration %s: no release or abort from the donor after the commit; "
                        "the config servers say %s owns the range: %s", session, owner,
                        strcmp(owner, sbl_shard_name()) == 0 ? "keeping it" : "giving it back");
                if (strcmp(owner, sbl_shard_name()) == 0)
                    recip_release();
                else
                    recip_abort();
                sbl_session_release_thread(); /* before shutdown may close storage */
                mine = false;
            } else {
                since = mig_now_ms() - wait_ms + MIG_CALL_MS; /* again later */
            }
        }
        pthread_mutex_unlock(&recip_cmd_mu);
        if (!mine)
            break;
    }
    free(session);
    return NULL;
}

static void crit_watch_start(void)
{
    char *session = strdup(recip.session);
    if (session != NULL && !start_detached(crit_watch, session))
        free(session); /* then only the donor's release or abort ends it */
}

int sbl_cmd_recv_chunk_abort(sbl_opctx_t *ctx, sbl_err_t *err)
{
    return serialized(recv_abort, ctx, err);
}

void sbl_cmd_migrations_shutdown(void)
{
    pthread_mutex_lock(&recip_cmd_mu); /* waits for a watchdog that is acting */
    recip_shutting_down = true;
    pthread_mutex_unlock(&recip_cmd_mu);
    /* a receiving thread must not outlive the storage engine */
    if (recip.active)
        recip_join();
}
