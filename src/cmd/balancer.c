/*
 * balancer.c: what the config server primary (sabled --configsvr) does for
 * migrations, after mongod 7.0:
 *
 *  _configsvrMoveRange   (from a router's moveChunk/moveRange, or from the
 *                        balancer) checks the chunk against config.chunks,
 *                        records config.migrations and config.changelog,
 *                        and has the donor shard's primary run the
 *                        migration (_shardsvrMoveRange, migrate.c).
 *  _configsvrCommitChunkMigration  (from the donor, in its critical
 *                        section) gives the chunk to the recipient with the
 *                        next major version; one other chunk the donor keeps
 *                        (the control chunk) gets major.1, so both shards'
 *                        versions move and stale routers are refused.
 *  _configsvrEnsureChunkVersionIsGreaterThan  (from whoever decides a
 *                        migration aborted from config.chunks) gives the
 *                        chunk a new major version if it is still at the
 *                        version given, so a late commit of that migration
 *                        (which names the version the chunk had at its
 *                        start) is refused.
 *  _configsvrBalancerStart / Stop / Status, and the balancer thread: a round
 *                        every few seconds while config.settings' balancer
 *                        document does not say stopped; in each collection
 *                        one action: a chunk off a draining shard
 *                        (removeShard; bal_drain.c picks it), else its
 *                        zones' (balancer_zones.c), else about one chunk
 *                        size of data from the shard holding the most of
 *                        the collection to the one holding the least while
 *                        they differ by 3 chunk sizes (mongod 7.0's rule:
 *                        bal_size.c decides, balancer_size.c reads the
 *                        shards' sizes and splits the range off).
 *
 * What must stay true: one migration at a time per shard, as donor or
 * recipient (busy[]: a second one involving either shard fails at once with
 * ConflictingOperationInProgress, as mongod's does, instead of waiting for
 * the first to end); a commit checks that the donor still owns exactly the
 * chunk at the version it had when the migration began, so a migration that
 * raced a split or another commit, or was decided aborted, fails instead of
 * giving away the wrong range (commits and bumps hold commit_mu).
 */
#include "cmd/bal_drain.h"
#include "cmd/bal_size.h"
#include "cmd/cmd_int.h"
#include "cmd/migrate_int.h"

#include "common/log.h"
#include "common/clock.h"
#include "doc/doc.h"
#include "repl/repl.h"
#include "server/server.h"
#include "shard/shard.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ROUND_IDLE_MS 2000 /* between rounds that moved nothing */
#define ROUND_BUSY_MS 100  /* after a round that moved a chunk */

static pthread_mutex_t commit_mu = PTHREAD_MUTEX_INITIALIZER;

void sbl_cmd_chunks_lock(bool hold)
{
    if (hold)
        pthread_mutex_lock(&commit_mu);
    else
        pthread_mutex_unlock(&commit_mu);
}

/* The shards in a migration now (under busy_mu). */
static pthread_mutex_t busy_mu = PTHREAD_MUTEX_INITIALIZER;
static char busy[64][128];
static int nbusy;

static int busy_find(const char *id)
{
    for (int i = 0; i < nbusy; i++)
        if (strcmp(busy[i], id) == 0)
            return i;
    return -1;
}

/* Mark from and to as migrating; ConflictingOperationInProgress (neither
 * marked) when either already is. */
static int busy_claim(const char *from, const char *to, sbl_err_t *err)
{
    pthread_mutex_lock(&busy_mu);
    const char *taken = busy_find(from) >= 0 ? from : busy_find(to) >= 0 ? to : NULL;
    if (taken == NULL && nbusy + 2 <= 64) {
        snprintf(busy[nbusy++], sizeof(busy[0]), "%s", from);
        snprintf(busy[nbusy++], sizeof(busy[0]), "%s", to);
    }
    pthread_mutex_unlock(&busy_mu);
    if (taken != NULL)
        return sbl_err_set(err, SBL_E_ConflictingOperationInProgress, "Unable to start a new "
                           "migration from %s to %s because shard %s is already in a migration "
                           "(one at a time per shard)", from, to, taken);
    return 0;
}

bool sbl_cmd_shard_migrating(const char *id)
{
    pthread_mutex_lock(&busy_mu);
    bool busy_now = busy_find(id) >= 0;
    pthread_mutex_unlock(&busy_mu);
    return busy_now;
}

static void busy_release(const char *from, const char *to)
{
    pthread_mutex_lock(&busy_mu);
    for (int k = 0; k < 2; k++) {
        int i = busy_find(k == 0 ? from : to);
        if (i >= 0)
            memcpy(busy[i], busy[--nbusy], sizeof(busy[0]));
    }
    pthread_mutex_unlock(&busy_mu);
}

static bool doc_of(const bson_t *d, const char *k, bson_t *out)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, d, k) && sbl_iter_doc(&it, out);
}

void sbl_cmd_shard_log(char sev, int id, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    sbl_log(sev, "SHARDING", id, msg, NULL);
}

int sbl_cmd_config_primary_check(sbl_err_t *err)
{
    if (sbl_server_options()->cluster_role != SBL_ROLE_CONFIGSVR)
        return sbl_err_set(err, SBL_E_IllegalOperation, "this command runs on the config "
                           "servers (--configsvr) only");
    if (!sbl_repl_writable())
        return sbl_err_set(err, SBL_E_NotWritablePrimary, "not primary");
    return 0;
}

/* The first document of cfg_find, copied into out; false when none. */
static bool cfg_find_one(const char *coll, const bson_t *filter, bson_t *out, sbl_err_t *err)
{
    bson_t arr;
    bson_iter_t it;
    bool found = false;
    if (sbl_cmd_config_find(coll, filter, NULL, &arr, err) == 0 && bson_iter_init(&it, &arr) &&
        bson_iter_next(&it)) {
        bson_t d;
        if (sbl_iter_doc(&it, &d)) {
            bson_copy_to(&d, out);
            found = true;
        }
    }
    bson_destroy(&arr);
    return found;
}

static int cfg_write(const bson_t *cmd, sbl_err_t *err)
{
    bson_t reply;
    int rc = sbl_cmd_run_checked("config", cmd, &reply, err);
    bson_destroy(&reply);
    return rc;
}

/* An entry of config.changelog (what, ns, details) in mongod's shape. */
static void changelog(const char *what, const char *ns, const bson_t *details)
{
    char host[256] = "localhost", id[400];
    gethostname(host, sizeof(host) - 1);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    bson_oid_t oid;
    bson_oid_init(&oid, NULL);
    char hex[25];
    bson_oid_to_string(&oid, hex);
    snprintf(id, sizeof(id), "%s:%d-%lld-%s", host, sbl_server_options()->port, (long long)ms,
             hex);
    bson_t cmd = BSON_INITIALIZER, docs, d;
    BSON_APPEND_UTF8(&cmd, "insert", "changelog");
    BSON_APPEND_ARRAY_BEGIN(&cmd, "documents", &docs);
    BSON_APPEND_DOCUMENT_BEGIN(&docs, "0", &d);
    BSON_APPEND_UTF8(&d, "_id", id);
    char server[300];
    snprintf(server, sizeof(server), "%s:%d", host, sbl_server_options()->port);
    BSON_APPEND_UTF8(&d, "server", server);
    BSON_APPEND_UTF8(&d, "shard", "config");
    BSON_APPEND_UTF8(&d, "clientAddr", "");
    BSON_APPEND_DATE_TIME(&d, "time", ms);
    BSON_APPEND_UTF8(&d, "what", what);
    BSON_APPEND_UTF8(&d, "ns", ns);
    BSON_APPEND_DOCUMENT(&d, "details", details);
    bson_append_document_end(&docs, &d);
    bson_append_array_end(&cmd, &docs);
    sbl_err_t e = {0};
    if (cfg_write(&cmd, &e) != 0)
        sbl_cmd_shard_log(SBL_LOG_WARNING, 21000, "writing config.changelog (%s) failed: %s", what, e.msg);
    bson_destroy(&cmd);
}

void sbl_cmd_changelog(const char *what, const char *ns, const bson_t *details)
{
    changelog(what, ns, details);
}

/* The connection string of shard id (config.shards' host) into out. */
static int shard_host(const char *id, char *out, size_t n, sbl_err_t *err)
{
    bson_t f = BSON_INITIALIZER, d = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&f, "_id", id);
    int rc = 0;
    if (cfg_find_one("shards", &f, &d, err) && sbl_doc_utf8(&d, "host") != NULL)
        snprintf(out, n, "%s", sbl_doc_utf8(&d, "host"));
    else
        rc = sbl_err_set(err, SBL_E_ShardNotFound, "Shard %s not found", id);
    bson_destroy(&f);
    bson_destroy(&d);
    return rc;
}

static int migrate(const char *ns, const bson_t *min, const bson_t *cmax, const bson_t *key,
                   const bson_value_t *uuid, const bson_t *chunk, const char *from,
                   const char *to, int flags, bson_t *details, sbl_err_t *err);

/* A migration's options (flags): moveChunk's forceJumbo; its _waitForDelete
 * (the donor deletes its copy before it answers, without the delay). */
enum { MOVE_FORCE = 1, MOVE_WAIT_DELETE = 2 };

/*
 * Move the chunk of ns that starts at min to shard to (max, when given,
 * must be its max).  Runs the whole migration; details receives what the
 * donor reported.  ConflictingOperationInProgress when the donor or the
 * recipient is in another migration.  MOVE_FORCE (moveChunk's forceJumbo):
 * no jumbo check, a chunk marked jumbo moves too.
 */
static int move_range_force(const char *ns, const bson_t *min, const bson_t *max, const char *to,
                            int flags, bson_t *details, sbl_err_t *err)
{
    bson_t coll = BSON_INITIALIZER, chunk = BSON_INITIALIZER, f = BSON_INITIALIZER, key, cmax;
    int rc = 0;
    bson_iter_t it;
    BSON_APPEND_UTF8(&f, "_id", ns);
    if (!cfg_find_one("collections", &f, &coll, err) ||
        (bson_iter_init_find(&it, &coll, "dropped") && bson_iter_as_bool(&it)) ||
        !bson_iter_init_find(&it, &coll, "uuid") || !doc_of(&coll, "key", &key)) {
        rc = err->code ? err->code
                       : sbl_err_set(err, SBL_E_NamespaceNotSharded, "ns %s not sharded.", ns);
        goto out;
    }
    bson_reinit(&f);
    sbl_append_value(&f, "uuid", 4, bson_iter_value(&it));
    BSON_APPEND_DOCUMENT(&f, "min", min);
    if (!cfg_find_one("chunks", &f, &chunk, err) || !doc_of(&chunk, "max", &cmax)) {
        rc = err->code ? err->code
                       : sbl_err_set(err, SBL_E_BadValue, "no chunk of %s starts at the range's "
                                     "min", ns);
        goto out;
    }
    if (max != NULL && sbl_doc_compare(max, &cmax) != 0) {
        rc = sbl_err_set(err, SBL_E_BadValue, "the range's max is not its chunk's max (split "
                         "the chunk first)");
        goto out;
    }
    const char *from = sbl_doc_utf8(&chunk, "shard");
    if (from == NULL) {
        rc = sbl_err_set(err, SBL_E_InternalError, "config.chunks entry without a shard");
        goto out;
    }
    if (strcmp(from, to) == 0)
        goto out; /* already there: nothing to do */
    if ((rc = busy_claim(from, to, err)) != 0)
        goto out;
    /* read again now that no other migration can change it: the donor's
     * commit must name the version the chunk has from here on */
    bson_t fresh = BSON_INITIALIZER;
    const char *owner;
    if (!cfg_find_one("chunks", &f, &fresh, err) ||
        (owner = sbl_doc_utf8(&fresh, "shard")) == NULL || strcmp(owner, from) != 0)
        rc = err->code ? err->code
                       : sbl_err_set(err, SBL_E_ConflictingOperationInProgress, "the chunk "
                                     "moved while its migration was being set up");
    if (rc == 0)
        rc = migrate(ns, min, &cmax, &key, bson_iter_value(&it), &fresh, from, to, flags,
                     details, err);
    bson_destroy(&fresh);
    busy_release(from, to);
out:
    bson_destroy(&coll);
    bson_destroy(&chunk);
    bson_destroy(&f);
    return rc;
}

/* The balancer's moves (sbl_move_range_fn): never forced. */
static int move_range(const char *ns, const bson_t *min, const bson_t *max, const char *to,
                      bson_t *details, sbl_err_t *err)
{
    return move_range_force(ns, min, max, to, 0, details, err);
}

/* Remove config.migrations' document mid. */
static void migrations_delete(const char *mid)
{
    bson_t del = BSON_INITIALIZER, dels, d, q;
    BSON_APPEND_UTF8(&del, "delete", "migrations");
    BSON_APPEND_ARRAY_BEGIN(&del, "deletes", &dels);
    BSON_APPEND_DOCUMENT_BEGIN(&dels, "0", &d);
    BSON_APPEND_DOCUMENT_BEGIN(&d, "q", &q);
    BSON_APPEND_UTF8(&q, "_id", mid);
    bson_append_document_end(&d, &q);
    BSON_APPEND_INT32(&d, "limit", 1);
    bson_append_document_end(&dels, &d);
    bson_append_array_end(&del, &dels);
    sbl_err_t e = {0};
    cfg_write(&del, &e);
    bson_destroy(&del);
}

/* The migration itself, its shards claimed: config.migrations and the
 * changelog around the donor's _shardsvrMoveRange. */
static int migrate(const char *ns, const bson_t *min, const bson_t *cmax, const bson_t *key,
                   const bson_value_t *uuid, const bson_t *chunk, const char *from,
                   const char *to, int flags, bson_t *details, sbl_err_t *err)
{
    bool force = (flags & MOVE_FORCE) != 0, wait_delete = (flags & MOVE_WAIT_DELETE) != 0;
    int rc;
    char from_host[1024], to_host[1024];
    if ((rc = shard_host(from, from_host, sizeof(from_host), err)) != 0 ||
        (rc = shard_host(to, to_host, sizeof(to_host), err)) != 0 ||
        (!force && (rc = sbl_chunk_check_movable(ns, key, chunk, from_host, err)) != 0))
        return rc;
    /* config.migrations: the migration in progress */
    char mid[600];
    {
        char *mj = bson_as_relaxed_extended_json(min, NULL);
        snprintf(mid, sizeof(mid), "%s-%s", ns, mj ? mj : "");
        bson_free(mj);
        bson_t cmd = BSON_INITIALIZER, docs, d;
        BSON_APPEND_UTF8(&cmd, "insert", "migrations");
        BSON_APPEND_ARRAY_BEGIN(&cmd, "documents", &docs);
        BSON_APPEND_DOCUMENT_BEGIN(&docs, "0", &d);
        BSON_APPEND_UTF8(&d, "_id", mid);
        BSON_APPEND_UTF8(&d, "ns", ns);
        sbl_append_value(&d, "uuid", 4, uuid);
        BSON_APPEND_DOCUMENT(&d, "min", min);
        BSON_APPEND_DOCUMENT(&d, "max", cmax);
        BSON_APPEND_UTF8(&d, "fromShard", from);
        BSON_APPEND_UTF8(&d, "toShard", to);
        bson_iter_t lm;
        if (bson_iter_init_find(&lm, chunk, "lastmod"))
            sbl_append_value(&d, "chunkVersion", -1, bson_iter_value(&lm));
        BSON_APPEND_BOOL(&d, "waitForDelete", wait_delete);
        BSON_APPEND_BOOL(&d, "forceJumbo", force);
        bson_append_document_end(&docs, &d);
        bson_append_array_end(&cmd, &docs);
        rc = cfg_write(&cmd, err);
        if (rc == SBL_E_DuplicateKey) {
            /* left by a config server primary that died during a migration
             * (the shards settle that one themselves): replaced */
            sbl_err_clear(err);
            migrations_delete(mid);
            rc = cfg_write(&cmd, err);
        }
        bson_destroy(&cmd);
        if (rc != 0)
            return rc;
    }
    bson_t det = BSON_INITIALIZER;
    BSON_APPEND_DOCUMENT(&det, "min", min);
    BSON_APPEND_DOCUMENT(&det, "max", cmax);
    BSON_APPEND_UTF8(&det, "from", from);
    BSON_APPEND_UTF8(&det, "to", to);
    changelog("moveChunk.start", ns, &det);
    bson_t cmd = BSON_INITIALIZER, reply;
    BSON_APPEND_UTF8(&cmd, "_shardsvrMoveRange", ns);
    BSON_APPEND_DOCUMENT(&cmd, "min", min);
    BSON_APPEND_DOCUMENT(&cmd, "max", cmax);
    BSON_APPEND_DOCUMENT(&cmd, "shardKeyPattern", key);
    BSON_APPEND_UTF8(&cmd, "fromShard", from);
    BSON_APPEND_UTF8(&cmd, "toShard", to);
    BSON_APPEND_UTF8(&cmd, "fromShardHost", from_host);
    BSON_APPEND_UTF8(&cmd, "toShardHost", to_host);
    if (wait_delete)
        BSON_APPEND_BOOL(&cmd, "waitForDelete", true);
    bson_iter_t lmv; /* the commit must find the chunk at this version still */
    if (bson_iter_init_find(&lmv, chunk, "lastmod"))
        sbl_append_value(&cmd, "chunkVersion", -1, bson_iter_value(&lmv));
    sbl_cmd_shard_log(SBL_LOG_INFO, 21000, "moving a chunk of %s from %s to %s", ns, from, to);
    rc = sbl_shard_remote_check(from_host, "admin", &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc == 0) {
        bson_iter_t r;
        bson_iter_init(&r, &reply);
        while (bson_iter_next(&r))
            if (strcmp(bson_iter_key(&r), "ok") != 0 && bson_iter_key(&r)[0] != '$' &&
                strcmp(bson_iter_key(&r), "operationTime") != 0)
                sbl_append_value(&det, bson_iter_key(&r), -1, bson_iter_value(&r));
        BSON_APPEND_UTF8(&det, "note", "success");
        if (details != NULL)
            bson_concat(details, &det);
        changelog("moveChunk.from", ns, &det);
    } else {
        /* as mongod: moveChunk.from says "aborted" (sh.status() counts
         * these), moveChunk.error carries the error too */
        BSON_APPEND_UTF8(&det, "note", "aborted");
        BSON_APPEND_UTF8(&det, "errmsg", err->msg);
        changelog("moveChunk.from", ns, &det);
        changelog("moveChunk.error", ns, &det);
        sbl_cmd_shard_log(SBL_LOG_WARNING, 21000, "moving a chunk of %s from %s to %s failed: %s", ns, from, to,
                err->msg);
    }
    bson_destroy(&reply);
    bson_destroy(&det);
    migrations_delete(mid);
    return rc;
}


int sbl_cmd_configsvr_move_range(sbl_opctx_t *ctx, sbl_err_t *err)
{
    int rc = sbl_cmd_config_primary_check(err);
    if (rc != 0)
        return rc;
    const char *ns = sbl_doc_utf8(ctx->cmd, "_configsvrMoveRange");
    const char *to = sbl_doc_utf8(ctx->cmd, "toShard");
    bson_t min, max;
    if (ns == NULL || to == NULL || !doc_of(ctx->cmd, "min", &min))
        return sbl_err_set(err, SBL_E_BadValue, "_configsvrMoveRange needs a namespace, min "
                           "and toShard");
    bool has_max = doc_of(ctx->cmd, "max", &max);
    bson_iter_t fj;
    int flags = bson_iter_init_find(&fj, ctx->cmd, "forceJumbo") && bson_iter_as_bool(&fj)
                    ? MOVE_FORCE : 0;
    if (bson_iter_init_find(&fj, ctx->cmd, "waitForDelete") && bson_iter_as_bool(&fj))
        flags |= MOVE_WAIT_DELETE;
    bson_t det = BSON_INITIALIZER;
    rc = move_range_force(ns, &min, has_max ? &max : NULL, to, flags, &det, err);
    if (rc == 0)
        BSON_APPEND_DOCUMENT(ctx->reply, "details", &det);
    bson_destroy(&det);
    return rc;
}

static bool ts_of(const bson_t *d, const char *k, uint32_t *t, uint32_t *i)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, d, k) || !BSON_ITER_HOLDS_TIMESTAMP(&it))
        return false;
    bson_iter_timestamp(&it, t, i);
    return true;
}

/* $set fields on the chunk with _id id, and $unset those of unset (may be NULL). */
static int chunk_update(const bson_value_t *id, const bson_t *set, const bson_t *unset,
                        sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, ups, u, q, s, wc;
    BSON_APPEND_UTF8(&cmd, "update", "chunks");
    BSON_APPEND_ARRAY_BEGIN(&cmd, "updates", &ups);
    BSON_APPEND_DOCUMENT_BEGIN(&ups, "0", &u);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "q", &q);
    sbl_append_value(&q, "_id", 3, id);
    bson_append_document_end(&u, &q);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "u", &s);
    BSON_APPEND_DOCUMENT(&s, "$set", set);
    if (unset != NULL)
        BSON_APPEND_DOCUMENT(&s, "$unset", unset);
    bson_append_document_end(&u, &s);
    bson_append_document_end(&ups, &u);
    bson_append_array_end(&cmd, &ups);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(&cmd, &wc);
    int rc = cfg_write(&cmd, err);
    bson_destroy(&cmd);
    return rc;
}

static int chunk_set(const bson_value_t *id, const bson_t *set, sbl_err_t *err)
{
    return chunk_update(id, set, NULL, err);
}

int mig_chunk_set(const bson_value_t *id, const bson_t *set, sbl_err_t *err)
{
    return chunk_set(id, set, err);
}

/* What a commit or a version bump reads of a collection's chunks. */
typedef struct chunk_scan {
    bson_t coll;           /* its config.collections document */
    bson_t chunks;         /* its chunks (an array) */
    uint32_t major, minor; /* the collection's highest chunk version */
    bson_value_t id;       /* the chunk starting at min (EOD: none; a view into chunks) */
    bson_t max;            /* its max */
    const char *shard;     /* its owner */
    uint32_t ma, mi;       /* its version */
    bson_t history;        /* its history (an array, newest first; empty: none) */
    bson_value_t ctl_id;   /* another chunk of ctl_shard's (EOD: none) */
} chunk_scan_t;

/* Read ns's collection and chunks into sc (free with scan_free) and find
 * the chunk starting at min, and another chunk of ctl_shard (NULL: none).
 * NamespaceNotSharded when ns has no collection document. */
static int scan_chunks(const char *ns, const bson_t *min, const char *ctl_shard,
                       chunk_scan_t *sc, sbl_err_t *err)
{
    bson_t f = BSON_INITIALIZER;
    bson_iter_t it, uuid;
    memset(sc, 0, sizeof(*sc));
    bson_init(&sc->coll);
    bson_init(&sc->chunks);
    bson_init(&sc->max);
    bson_init(&sc->history);
    BSON_APPEND_UTF8(&f, "_id", ns);
    bool have = cfg_find_one("collections", &f, &sc->coll, err);
    bson_destroy(&f);
    if (!have || !bson_iter_init_find(&uuid, &sc->coll, "uuid"))
        return err->code ? err->code
                         : sbl_err_set(err, SBL_E_NamespaceNotSharded, "ns %s not sharded.", ns);
    bson_init(&f);
    sbl_append_value(&f, "uuid", 4, bson_iter_value(&uuid));
    bson_destroy(&sc->chunks);
    int rc = sbl_cmd_config_find("chunks", &f, NULL, &sc->chunks, err);
    bson_destroy(&f);
    if (rc != 0)
        return rc;
    bson_iter_init(&it, &sc->chunks);
    while (bson_iter_next(&it)) {
        bson_t c, cmin;
        uint32_t ma = 0, mi = 0;
        bson_iter_t id;
        if (!sbl_iter_doc(&it, &c) || !bson_iter_init_find(&id, &c, "_id"))
            continue;
        if (ts_of(&c, "lastmod", &ma, &mi) &&
            (ma > sc->major || (ma == sc->major && mi > sc->minor))) {
            sc->major = ma;
            sc->minor = mi;
        }
        const char *sh = sbl_doc_utf8(&c, "shard");
        if (sh != NULL && doc_of(&c, "min", &cmin) && sbl_doc_compare(&cmin, min) == 0) {
            sc->id = *bson_iter_value(&id);
            sc->shard = sh;
            sc->ma = ma;
            sc->mi = mi;
            doc_of(&c, "max", &sc->max);
            bson_iter_t h;
            if (bson_iter_init_find(&h, &c, "history"))
                sbl_iter_array(&h, &sc->history);
        } else if (sh != NULL && ctl_shard != NULL && strcmp(sh, ctl_shard) == 0 &&
                   sc->ctl_id.value_type == BSON_TYPE_EOD) {
            sc->ctl_id = *bson_iter_value(&id);
        }
    }
    return 0;
}

static void scan_free(chunk_scan_t *sc)
{
    bson_destroy(&sc->coll);
    bson_destroy(&sc->chunks);
}

static uint64_t hist_valid_after(const bson_iter_t *entry)
{
    bson_iter_t f;
    uint32_t t = 0, i = 0;
    if (bson_iter_recurse(entry, &f) && bson_iter_find(&f, "validAfter") &&
        BSON_ITER_HOLDS_TIMESTAMP(&f))
        bson_iter_timestamp(&f, &t, &i);
    return ((uint64_t)t << 32) | i;
}

/* A migration's commit time (its history entry's validAfter): later than
 * the time the donor asks for (cmd's validAfter: after every change the
 * migration made on either shard), than this member's cluster time and than
 * the chunk's newest history entry. */
static uint64_t commit_time(const bson_t *cmd, const bson_t *history)
{
    uint32_t t, i;
    sbl_clock_ts_next(&t, &i);
    uint64_t at = ((uint64_t)t << 32) | i, now = sbl_repl_clock_now() + 1;
    bson_iter_t it;
    if (at < now)
        at = now;
    if (bson_iter_init_find(&it, cmd, "validAfter") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        bson_iter_timestamp(&it, &t, &i);
        if (at < (((uint64_t)t << 32) | i))
            at = ((uint64_t)t << 32) | i;
    }
    if (bson_iter_init(&it, history) && bson_iter_next(&it) && hist_valid_after(&it) >= at)
        at = hist_valid_after(&it) + 1;
    return at;
}

/* history: {validAfter, shard: to} before the entries of old (newest
 * first), as mongod: those older than minSnapshotHistoryWindowInSeconds
 * before valid go, except the newest of them (a read within the window may
 * still need it). */
static void append_history(bson_t *set, uint64_t valid, const char *to, const bson_t *old)
{
    bson_t hist, h;
    char key[16];
    uint32_t n = 0;
    uint64_t cutoff_s = (valid >> 32) - (uint64_t)sbl_repl_snapshot_window_s();
    BSON_APPEND_ARRAY_BEGIN(set, "history", &hist);
    BSON_APPEND_DOCUMENT_BEGIN(&hist, "0", &h);
    BSON_APPEND_TIMESTAMP(&h, "validAfter", (uint32_t)(valid >> 32), (uint32_t)valid);
    BSON_APPEND_UTF8(&h, "shard", to);
    bson_append_document_end(&hist, &h);
    uint64_t newer = valid; /* the entry before this one's validAfter */
    bson_iter_t it;
    if (bson_iter_init(&it, old))
        while (bson_iter_next(&it) && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            if ((newer >> 32) < cutoff_s)
                break; /* reads at or after the cutoff resolve before this one */
            snprintf(key, sizeof(key), "%u", ++n);
            sbl_append_value(&hist, key, -1, bson_iter_value(&it));
            newer = hist_valid_after(&it);
        }
    bson_append_array_end(set, &hist);
}

int sbl_cmd_configsvr_commit_migration(sbl_opctx_t *ctx, sbl_err_t *err)
{
    int rc = sbl_cmd_config_primary_check(err);
    if (rc != 0)
        return rc;
    const char *ns = sbl_doc_utf8(ctx->cmd, "_configsvrCommitChunkMigration");
    const char *from = sbl_doc_utf8(ctx->cmd, "fromShard"), *to = sbl_doc_utf8(ctx->cmd, "toShard");
    bson_t mc, min, max;
    if (ns == NULL || from == NULL || to == NULL || !doc_of(ctx->cmd, "migratedChunk", &mc) ||
        !doc_of(&mc, "min", &min) || !doc_of(&mc, "max", &max))
        return sbl_err_set(err, SBL_E_BadValue, "_configsvrCommitChunkMigration needs a "
                           "namespace, fromShard, toShard and migratedChunk {min, max}");
    mig_fp_hold(MIG_FP_CFG_COMMIT); /* tests: a commit that arrives late */
    uint32_t want_ma, want_mi; /* the chunk's version when the migration began */
    bool want_v = ts_of(&mc, "lastmod", &want_ma, &want_mi);
    pthread_mutex_lock(&commit_mu);
    chunk_scan_t sc;
    if ((rc = scan_chunks(ns, &min, from, &sc, err)) != 0)
        goto out;
    uint32_t major = sc.major;
    bson_value_t mig_id = sc.id, ctl_id = sc.ctl_id;
    if (mig_id.value_type == BSON_TYPE_EOD || strcmp(sc.shard, from) != 0 ||
        sbl_doc_compare(&sc.max, &max) != 0) {
        rc = sbl_err_set(err, SBL_E_ConflictingOperationInProgress, "the chunk being migrated "
                         "is no longer owned by %s with these bounds (a concurrent split or "
                         "migration): the migration is aborted", from);
        goto out;
    }
    if (want_v && (sc.ma != want_ma || sc.mi != want_mi)) {
        rc = sbl_err_set(err, SBL_E_ConflictingOperationInProgress, "the chunk being migrated "
                         "is at version %u|%u, no longer %u|%u (the migration was aborted by "
                         "its recovery): the commit is refused", sc.ma, sc.mi, want_ma, want_mi);
        goto out;
    }
    uint32_t t, i;
    uint64_t valid = commit_time(ctx->cmd, &sc.history);
    t = (uint32_t)(valid >> 32);
    i = (uint32_t)valid;
    bson_t set = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&set, "shard", to);
    BSON_APPEND_TIMESTAMP(&set, "lastmod", major + 1, 0);
    BSON_APPEND_TIMESTAMP(&set, "onCurrentShardSince", t, i);
    append_history(&set, valid, to, &sc.history);
    bson_t unset = BSON_INITIALIZER; /* as mongod: a moved chunk is not jumbo (forceJumbo) */
    BSON_APPEND_UTF8(&unset, "jumbo", "");
    rc = chunk_update(&mig_id, &set, &unset, err);
    bson_destroy(&unset);
    bson_destroy(&set);
    if (rc == 0 && ctl_id.value_type != BSON_TYPE_EOD) {
        bson_init(&set);
        BSON_APPEND_TIMESTAMP(&set, "lastmod", major + 1, 1);
        rc = chunk_set(&ctl_id, &set, err);
        bson_destroy(&set);
    }
    if (rc == 0) {
        /* the commit is the migration's point of no return: a majority of
         * the config servers must have it before the donor deletes its copy
         * (an internal write does not wait for its write concern itself) */
        rc = mig_await_majority(60000, "waiting for the commit to reach a majority of the "
                                "config servers", err);
    }
    if (rc == 0) {
        bson_t det = BSON_INITIALIZER, v;
        BSON_APPEND_DOCUMENT(&det, "min", &min);
        BSON_APPEND_DOCUMENT(&det, "max", &max);
        BSON_APPEND_UTF8(&det, "from", from);
        BSON_APPEND_UTF8(&det, "to", to);
        BSON_APPEND_TIMESTAMP(&det, "migratedChunkVersion", major + 1, 0);
        if (ctl_id.value_type != BSON_TYPE_EOD)
            BSON_APPEND_TIMESTAMP(&det, "controlChunkVersion", major + 1, 1);
        changelog("moveChunk.commit", ns, &det);
        bson_destroy(&det);
        BSON_APPEND_TIMESTAMP(ctx->reply, "validAfter", t, i);
        BSON_APPEND_DOCUMENT_BEGIN(ctx->reply, "shardVersion", &v);
        bson_iter_t e;
        if (bson_iter_init_find(&e, &sc.coll, "lastmodEpoch"))
            sbl_append_value(&v, "e", 1, bson_iter_value(&e));
        if (bson_iter_init_find(&e, &sc.coll, "timestamp"))
            sbl_append_value(&v, "t", 1, bson_iter_value(&e));
        BSON_APPEND_TIMESTAMP(&v, "v", major + 1, ctl_id.value_type != BSON_TYPE_EOD ? 1 : 0);
        bson_append_document_end(ctx->reply, &v);
    }
out:
    pthread_mutex_unlock(&commit_mu);
    scan_free(&sc);
    return rc;
}

int sbl_cmd_configsvr_ensure_chunk_version(sbl_opctx_t *ctx, sbl_err_t *err)
{
    int rc = sbl_cmd_config_primary_check(err);
    if (rc != 0)
        return rc;
    const char *ns = sbl_doc_utf8(ctx->cmd, "nss");
    bson_t min, max;
    uint32_t vma, vmi;
    if (ns == NULL || !doc_of(ctx->cmd, "minKey", &min) || !doc_of(ctx->cmd, "maxKey", &max) ||
        !ts_of(ctx->cmd, "version", &vma, &vmi))
        return sbl_err_set(err, SBL_E_BadValue, "_configsvrEnsureChunkVersionIsGreaterThan "
                           "needs nss, minKey, maxKey and version (a Timestamp)");
    pthread_mutex_lock(&commit_mu);
    chunk_scan_t sc;
    if ((rc = scan_chunks(ns, &min, NULL, &sc, err)) == 0 &&
        sc.id.value_type != BSON_TYPE_EOD && sbl_doc_compare(&sc.max, &max) == 0 &&
        (sc.ma < vma || (sc.ma == vma && sc.mi <= vmi))) {
        /* the chunk is as the caller saw it: a new major version, so no
         * commit of a migration that began before can match it any more */
        bson_t set = BSON_INITIALIZER;
        BSON_APPEND_TIMESTAMP(&set, "lastmod", sc.major + 1, 0);
        rc = chunk_set(&sc.id, &set, err);
        bson_destroy(&set);
        if (rc == 0)
            rc = mig_await_majority(60000, "waiting for the chunk's new version to reach a "
                                    "majority of the config servers", err);
        if (rc == 0)
            sbl_cmd_shard_log(SBL_LOG_INFO, 21000, "a chunk of %s is at version %u|0 after a migration's "
                    "recovered abort", ns, sc.major + 1);
    }
    pthread_mutex_unlock(&commit_mu);
    scan_free(&sc);
    return rc;
}

/* ---- the balancer ---- */

static pthread_mutex_t bal_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t bal_cv = PTHREAD_COND_INITIALIZER;
static pthread_t bal_thread;
static bool bal_running, bal_stop, bal_in_round;
static int64_t bal_rounds;

/* config.settings' balancer document says it runs (mongod's default: yes). */
static bool balancer_enabled(void)
{
    bson_t f = BSON_INITIALIZER, d = BSON_INITIALIZER;
    sbl_err_t e = {0};
    BSON_APPEND_UTF8(&f, "_id", "balancer");
    bool on = true;
    if (cfg_find_one("settings", &f, &d, &e)) {
        bson_iter_t it;
        const char *mode = sbl_doc_utf8(&d, "mode");
        if (bson_iter_init_find(&it, &d, "stopped") && bson_iter_as_bool(&it))
            on = false;
        if (mode != NULL && strcmp(mode, "off") == 0)
            on = false;
    }
    bson_destroy(&f);
    bson_destroy(&d);
    return on;
}

int sbl_bal_move_range(const char *ns, const bson_t *min, const bson_t *max, const char *to,
                       bson_t *details, sbl_err_t *err)
{
    return move_range(ns, min, max, to, details, err);
}

/* Outside zones: move about a chunk size from the shard with the most of
 * bc's data to the one with the least while they differ by 3 chunk sizes
 * (bal_size.c).  chunks: its config.chunks, sorted by min. */
static int balance_by_size(sbl_bal_coll_t *bc, const bson_t *chunks, char ids[][128],
                           int nshards)
{
    int from, to, n = 0;
    if (!sbl_bal_size_pick(bc->sizes, NULL, nshards, bc->chunk_bytes, &from, &to))
        return 0;
    bson_iter_t it, first_it; /* a bson_t view cannot be copied: its iterator is */
    bson_t c;
    const char *sh;
    bool found = false;
    bson_iter_init(&it, chunks);
    while (bson_iter_next(&it)) {
        if (!sbl_iter_doc(&it, &c) || (sh = sbl_doc_utf8(&c, "shard")) == NULL ||
            strcmp(sh, ids[from]) != 0)
            continue;
        n++;
        if (!found && !sbl_chunk_is_jumbo(&c)) { /* a jumbo chunk stays where it is */
            first_it = it;
            found = true;
        }
    }
    return found && sbl_iter_doc(&first_it, &c) ? sbl_bal_move_data(bc, &c, ids, from, to, n)
                                                : 0;
}

/* One chunk off a draining shard, as bal_drain.c picks it: 1 moved (dry:
 * would), 0 nothing to move, -1 failed. */
static int drain_collection(sbl_bal_coll_t *bc, const bson_t *chunks, char ids[][128],
                            int nshards, char drain[][128], int ndrain, const int64_t *sizes)
{
    bson_t min, max;
    int to;
    if (ndrain == 0 || !sbl_bal_drain_pick(chunks, ids, nshards, drain, ndrain, sizes, &min,
                                           &max, &to))
        return 0;
    return sbl_bal_move_chunk(bc, &min, &max, ids, to, "draining");
}

int sbl_bal_collection(sbl_bal_coll_t *bc, char ids[][128], int nshards, char drain[][128],
                       int ndrain)
{
    bson_iter_t it;
    if (bc->ns == NULL || !bson_iter_init_find(&it, bc->coll, "uuid"))
        return 0;
    bson_t f = BSON_INITIALIZER, sort = BSON_INITIALIZER, chunks;
    sbl_append_value(&f, "uuid", 4, bson_iter_value(&it));
    BSON_APPEND_INT32(&sort, "min", 1);
    sbl_err_t e = {0};
    int r = sbl_cmd_config_find("chunks", &f, &sort, &chunks, &e) == 0 ? 0 : -1;
    bson_destroy(&f);
    bson_destroy(&sort);
    /* every decision compares data sizes: every shard's, this round (a
     * draining shard's chunks leave even when a size is missing) */
    bool sized = r == 0 && nshards >= 1 && sbl_bal_sizes(bc, ids, nshards, &e) == 0;
    if (r == 0)
        r = drain_collection(bc, &chunks, ids, nshards, drain, ndrain,
                             sized ? bc->sizes : NULL);
    if (r == 0 && nshards >= 1 && !sized) {
        sbl_cmd_shard_log(SBL_LOG_WARNING, 21000, "balancing %s waits a round: %s", bc->ns, e.msg);
        r = bc->dry ? -1 : 0;
    }
    if (r == 0 && nshards >= 1) {
        /* a collection with zone ranges follows its zones (balancer_zones.c) */
        r = sbl_zones_balance(bc, &chunks, ids, nshards);
        if (r == SBL_ZONES_NONE)
            r = balance_by_size(bc, &chunks, ids, nshards);
    }
    bson_destroy(&chunks);
    return r;
}

void sbl_bal_shards(char ids[][128], int *nshards, char drain[][128], int *ndrain)
{
    bson_t empty = BSON_INITIALIZER, shards;
    sbl_err_t e = {0};
    *nshards = *ndrain = 0;
    if (sbl_cmd_config_find("shards", &empty, NULL, &shards, &e) == 0) {
        bson_iter_t it;
        bson_iter_init(&it, &shards);
        while (bson_iter_next(&it) && *nshards + *ndrain < SBL_BAL_MAX_SHARDS) {
            bson_t s;
            bson_iter_t dr;
            if (!sbl_iter_doc(&it, &s) || sbl_doc_utf8(&s, "_id") == NULL)
                continue;
            if (bson_iter_init_find(&dr, &s, "draining") && bson_iter_as_bool(&dr))
                snprintf(drain[(*ndrain)++], 128, "%s", sbl_doc_utf8(&s, "_id"));
            else
                snprintf(ids[(*nshards)++], 128, "%s", sbl_doc_utf8(&s, "_id"));
        }
    }
    bson_destroy(&shards);
    bson_destroy(&empty);
}

/* One round over every sharded collection; how many chunks moved. */
static int balance_round(bool *errorp)
{
    bson_t empty = BSON_INITIALIZER, colls;
    sbl_err_t e = {0};
    char ids[SBL_BAL_MAX_SHARDS][128], drain[SBL_BAL_MAX_SHARDS][128];
    int nshards, ndrain, moved = 0;
    static sbl_bal_coll_t bc; /* large: not on the stack (only this thread) */
    *errorp = false;
    sbl_bal_shards(ids, &nshards, drain, &ndrain);
    bool work = nshards >= 2 || (nshards >= 1 && ndrain > 0);
    if (work && sbl_cmd_config_find("collections", &empty, NULL, &colls, &e) == 0) {
        bson_iter_t it;
        bson_iter_init(&it, &colls);
        while (bson_iter_next(&it)) {
            bson_t c;
            bson_iter_t nb;
            if (!sbl_iter_doc(&it, &c) ||
                (bson_iter_init_find(&nb, &c, "noBalance") && bson_iter_as_bool(&nb)) ||
                (bson_iter_init_find(&nb, &c, "dropped") && bson_iter_as_bool(&nb)))
                continue;
            memset(&bc, 0, sizeof(bc));
            bc.ns = sbl_doc_utf8(&c, "_id");
            bc.coll = &c;
            int r = sbl_bal_collection(&bc, ids, nshards, drain, ndrain);
            if (r > 0)
                moved++;
            else if (r < 0)
                *errorp = true;
            pthread_mutex_lock(&bal_mu);
            bool stop = bal_stop;
            pthread_mutex_unlock(&bal_mu);
            if (stop || !balancer_enabled())
                break;
        }
        bson_destroy(&colls);
    } else if (work) {
        bson_destroy(&colls);
    }
    bson_destroy(&empty);
    pthread_mutex_lock(&bal_mu);
    bool stop = bal_stop;
    pthread_mutex_unlock(&bal_mu);
    if (!stop)
        sbl_cmd_automerge_tick(ids, nshards); /* chunk_merge.c */
    return moved;
}

/* config.actionlog's balancer.round entry, as mongod writes it. */
static void actionlog_round(int64_t millis, int moved, bool error)
{
    char host[256] = "localhost", server[300];
    gethostname(host, sizeof(host) - 1);
    snprintf(server, sizeof(server), "%s:%d", host, sbl_server_options()->port);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    bson_t cmd = BSON_INITIALIZER, docs, d, det;
    bson_oid_t oid;
    bson_oid_init(&oid, NULL);
    BSON_APPEND_UTF8(&cmd, "insert", "actionlog");
    BSON_APPEND_ARRAY_BEGIN(&cmd, "documents", &docs);
    BSON_APPEND_DOCUMENT_BEGIN(&docs, "0", &d);
    BSON_APPEND_OID(&d, "_id", &oid);
    BSON_APPEND_UTF8(&d, "server", server);
    BSON_APPEND_UTF8(&d, "what", "balancer.round");
    BSON_APPEND_DATE_TIME(&d, "time", (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
    BSON_APPEND_DOCUMENT_BEGIN(&d, "details", &det);
    BSON_APPEND_INT64(&det, "executionTimeMillis", millis);
    BSON_APPEND_BOOL(&det, "errorOccured", error);
    BSON_APPEND_INT32(&det, "chunksMoved", moved);
    bson_append_document_end(&d, &det);
    bson_append_document_end(&docs, &d);
    bson_append_array_end(&cmd, &docs);
    sbl_err_t e = {0};
    cfg_write(&cmd, &e);
    bson_destroy(&cmd);
}

static void *balancer_main(void *arg)
{
    (void)arg;
    sbl_thread_name("Balancer");
    int wait_ms = ROUND_IDLE_MS;
    pthread_mutex_lock(&bal_mu);
    while (!bal_stop) {
        struct timespec ts = sbl_deadline_in_ms(wait_ms);
        pthread_cond_timedwait(&bal_cv, &bal_mu, &ts);
        if (bal_stop)
            break;
        wait_ms = ROUND_IDLE_MS;
        pthread_mutex_unlock(&bal_mu);
        bool run = sbl_repl_writable() && balancer_enabled();
        pthread_mutex_lock(&bal_mu);
        if (!run || bal_stop)
            continue;
        bal_in_round = true;
        bal_rounds++;
        pthread_mutex_unlock(&bal_mu);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        bool error = false;
        int moved = balance_round(&error);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (moved > 0 || error)
            actionlog_round((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000,
                            moved, error);
        pthread_mutex_lock(&bal_mu);
        bal_in_round = false;
        pthread_cond_broadcast(&bal_cv);
        if (moved > 0)
            wait_ms = ROUND_BUSY_MS;
    }
    pthread_mutex_unlock(&bal_mu);
    sbl_session_release_thread();
    return NULL;
}

void sbl_cmd_balancer_start_thread(void)
{
    if (sbl_server_options()->cluster_role != SBL_ROLE_CONFIGSVR || bal_running)
        return;
    bal_stop = false;
    if (pthread_create(&bal_thread, NULL, balancer_main, NULL) == 0)
        bal_running = true;
}

void sbl_cmd_balancer_stop_thread(void)
{
    if (!bal_running)
        return;
    pthread_mutex_lock(&bal_mu);
    bal_stop = true;
    pthread_cond_broadcast(&bal_cv);
    pthread_mutex_unlock(&bal_mu);
    pthread_join(bal_thread, NULL);
    bal_running = false;
}

static int settings_set(bool on, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, ups, u, q, s, set;
    BSON_APPEND_UTF8(&cmd, "update", "settings");
    BSON_APPEND_ARRAY_BEGIN(&cmd, "updates", &ups);
    BSON_APPEND_DOCUMENT_BEGIN(&ups, "0", &u);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "q", &q);
    BSON_APPEND_UTF8(&q, "_id", "balancer");
    bson_append_document_end(&u, &q);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "u", &s);
    BSON_APPEND_DOCUMENT_BEGIN(&s, "$set", &set);
    BSON_APPEND_UTF8(&set, "mode", on ? "full" : "off");
    BSON_APPEND_BOOL(&set, "stopped", !on);
    bson_append_document_end(&s, &set);
    bson_append_document_end(&u, &s);
    BSON_APPEND_BOOL(&u, "upsert", true);
    bson_append_document_end(&ups, &u);
    bson_append_array_end(&cmd, &ups);
    int rc = cfg_write(&cmd, err);
    bson_destroy(&cmd);
    return rc;
}

int sbl_cmd_configsvr_balancer_start(sbl_opctx_t *ctx, sbl_err_t *err)
{
    int rc = sbl_cmd_config_primary_check(err);
    if (rc == 0)
        rc = settings_set(true, err);
    if (rc == 0) {
        pthread_mutex_lock(&bal_mu);
        pthread_cond_broadcast(&bal_cv); /* a round now */
        pthread_mutex_unlock(&bal_mu);
    }
    (void)ctx;
    return rc;
}

int sbl_cmd_configsvr_balancer_stop(sbl_opctx_t *ctx, sbl_err_t *err)
{
    int rc = sbl_cmd_config_primary_check(err);
    if (rc == 0)
        rc = settings_set(false, err);
    if (rc == 0) { /* as mongod: return once the round in progress is over */
        pthread_mutex_lock(&bal_mu);
        while (bal_in_round)
            pthread_cond_wait(&bal_cv, &bal_mu);
        pthread_mutex_unlock(&bal_mu);
    }
    (void)ctx;
    return rc;
}

int sbl_cmd_configsvr_balancer_status(sbl_opctx_t *ctx, sbl_err_t *err)
{
    int rc = sbl_cmd_config_primary_check(err);
    if (rc != 0)
        return rc;
    bool on = balancer_enabled();
    pthread_mutex_lock(&bal_mu);
    BSON_APPEND_UTF8(ctx->reply, "mode", on ? "full" : "off");
    BSON_APPEND_BOOL(ctx->reply, "inBalancerRound", bal_in_round);
    BSON_APPEND_INT64(ctx->reply, "numBalancerRounds", bal_rounds);
    pthread_mutex_unlock(&bal_mu);
    return 0;
}
