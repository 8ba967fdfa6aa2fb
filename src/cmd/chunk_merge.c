/*
 * chunk_merge.c: merging chunks on the config server primary, after mongod
 * 7.0, and clearing a chunk's jumbo flag:
 *
 *  _configsvrCommitChunksMerge {ns, shard, chunkRange: {min, max}}  (from a
 *      router's mergeChunks): the shard's chunks that exactly fill
 *      [min, max) become one, at the collection's version with the next
 *      minor; a range that already is one chunk of the shard is a success.
 *  _configsvrCommitMergeAllChunksOnShard {ns, shard, maxNumberOfChunksToMerge}
 *      (mergeAllChunksOnShard, and the AutoMerger): every run of two or more
 *      contiguous mergeable chunks of the shard becomes one chunk.
 *  _configsvrClearJumboFlag {ns, minKey, maxKey}  (clearJumboFlag): the
 *      chunk with exactly those bounds loses jumbo and takes the next major
 *      version.
 *  The AutoMerger (sbl_cmd_automerge_tick, from the balancer thread): every
 *      autoMergerIntervalSecs, while config.settings {_id: "automerge"} is
 *      not enabled: false, each collection that is balanced (not noBalance)
 *      and not enableAutoMerge: false has each shard's mergeable chunks
 *      merged.
 *
 * A chunk is mergeable (mergeAllChunksOnShard, the AutoMerger) as in mongod
 * 7.0: not jumbo, and on its shard (onCurrentShardSince) since before the
 * history a snapshot read or a transaction may still need (the longest of
 * minSnapshotHistoryWindowInSeconds, transactionLifetimeLimitSeconds and
 * 10 s ago), so no read at a time the window keeps finds a merged chunk whose one
 * history entry is newer than it.  mergeChunks merges what it is told.  A
 * merged chunk keeps one history entry {validAfter: the newest of its parts',
 * shard}.
 *
 * What must stay true: the rewrite of config.chunks (the first chunk of a
 * run takes the run's max, the version and history; the others are deleted)
 * is one multi-document transaction on config.chunks, so a router or shard
 * reading the chunks sees them before or after, never between; it runs under
 * the chunk lock balancer.c's commits take, and not while the shard is in a
 * migration (whose commit would no longer find its chunk).
 */
#include "cmd/cmd_int.h"
#include "cmd/migrate_int.h"

#include "common/log.h"
#include "doc/doc.h"
#include "repl/repl.h"
#include "shard/shard.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define MAX_RUNS 4096 /* merged ranges per command */

static atomic_llong automerge_interval_s = 3600; /* autoMergerIntervalSecs */

#define merge_log(...) sbl_cmd_shard_log(SBL_LOG_INFO, 21001, __VA_ARGS__)

static bool ts_field(const bson_t *d, const char *k, uint32_t *t, uint32_t *i)
{
    bson_iter_t it;
    *t = *i = 0;
    if (!bson_iter_init_find(&it, d, k) || !BSON_ITER_HOLDS_TIMESTAMP(&it))
        return false;
    bson_iter_timestamp(&it, t, i);
    return true;
}

/* When a chunk came to its shard: its onCurrentShardSince, else its newest
 * history entry's validAfter; 0 when it records neither. */
static uint64_t chunk_since(const bson_t *c)
{
    uint32_t t, i;
    if (ts_field(c, "onCurrentShardSince", &t, &i))
        return ((uint64_t)t << 32) | i;
    bson_iter_t it, h;
    if (bson_iter_init_find(&it, c, "history") && bson_iter_recurse(&it, &h) &&
        bson_iter_next(&h) && BSON_ITER_HOLDS_DOCUMENT(&h)) {
        bson_t e;
        if (sbl_iter_doc(&h, &e) && ts_field(&e, "validAfter", &t, &i))
            return ((uint64_t)t << 32) | i;
    }
    return 0;
}

/* What a merge reads of a collection: its document and its chunks sorted
 * by min, and its version (the highest chunk version). */
typedef struct coll_chunks {
    bson_t coll, chunks;
    bson_value_t uuid; /* a view into coll */
    uint32_t major, minor;
} coll_chunks_t;

static void cc_free(coll_chunks_t *cc)
{
    bson_destroy(&cc->coll);
    bson_destroy(&cc->chunks);
}

/* Read ns's collection and chunks into cc (cc_free it either way);
 * NamespaceNotSharded when config.collections does not have ns. */
static int cc_read(const char *ns, coll_chunks_t *cc, sbl_err_t *err)
{
    bson_t f = BSON_INITIALIZER, arr, sort = BSON_INITIALIZER;
    bson_iter_t it;
    memset(cc, 0, sizeof(*cc));
    bson_init(&cc->coll);
    bson_init(&cc->chunks);
    BSON_APPEND_UTF8(&f, "_id", ns);
    int rc = sbl_cmd_config_find("collections", &f, NULL, &arr, err);
    bson_destroy(&f);
    bool found = false;
    if (rc == 0 && bson_iter_init(&it, &arr) && bson_iter_next(&it)) {
        bson_t d;
        bson_iter_t dr;
        if (sbl_iter_doc(&it, &d) &&
            !(bson_iter_init_find(&dr, &d, "dropped") && bson_iter_as_bool(&dr))) {
            bson_concat(&cc->coll, &d);
            found = true;
        }
    }
    bson_destroy(&arr);
    if (rc != 0)
        return rc;
    if (!found || !bson_iter_init_find(&it, &cc->coll, "uuid"))
        return sbl_err_set(err, SBL_E_NamespaceNotSharded, "Collection %s is not sharded.", ns);
    cc->uuid = *bson_iter_value(&it);
    bson_init(&f);
    sbl_append_value(&f, "uuid", 4, &cc->uuid);
    BSON_APPEND_INT32(&sort, "min", 1);
    bson_destroy(&cc->chunks);
    rc = sbl_cmd_config_find("chunks", &f, &sort, &cc->chunks, err);
    bson_destroy(&f);
    bson_destroy(&sort);
    if (rc != 0)
        return rc;
    bson_iter_init(&it, &cc->chunks);
    while (bson_iter_next(&it)) {
        bson_t c;
        uint32_t ma, mi;
        if (sbl_iter_doc(&it, &c) && ts_field(&c, "lastmod", &ma, &mi) &&
            (ma > cc->major || (ma == cc->major && mi > cc->minor))) {
            cc->major = ma;
            cc->minor = mi;
        }
    }
    return 0;
}

/* One merged range: chunks [first, first + n) of the sorted chunk array. */
typedef struct run {
    uint32_t first, n;
} run_t;

/* The i-th chunk of arr into c (a view). */
static bool chunk_at(const bson_t *arr, uint32_t i, bson_t *c)
{
    char key[16];
    bson_iter_t it;
    snprintf(key, sizeof(key), "%u", i);
    return bson_iter_init_find(&it, arr, key) && sbl_iter_doc(&it, c);
}

static void session_fields(bson_t *cmd, const uint8_t lsid[16], bool start)
{
    bson_t l;
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "lsid", &l);
    BSON_APPEND_BINARY(&l, "id", BSON_SUBTYPE_UUID, lsid, 16);
    bson_append_document_end(cmd, &l);
    BSON_APPEND_INT64(cmd, "txnNumber", 1);
    BSON_APPEND_BOOL(cmd, "autocommit", false);
    if (start)
        BSON_APPEND_BOOL(cmd, "startTransaction", true);
}

/* A chunk version {e, t, v} of cc's collection at major.minor into out[k]. */
static void append_cv(bson_t *out, const char *k, const coll_chunks_t *cc, uint32_t major,
                      uint32_t minor)
{
    bson_t v;
    bson_iter_t e;
    BSON_APPEND_DOCUMENT_BEGIN(out, k, &v);
    if (bson_iter_init_find(&e, &cc->coll, "lastmodEpoch"))
        sbl_append_value(&v, "e", 1, bson_iter_value(&e));
    if (bson_iter_init_find(&e, &cc->coll, "timestamp"))
        sbl_append_value(&v, "t", 1, bson_iter_value(&e));
    BSON_APPEND_TIMESTAMP(&v, "v", major, minor);
    bson_append_document_end(out, &v);
}

/* config.changelog's "merge" entry of each run, as mongod writes them:
 * {prevPlacementVersion, mergedVersion, owningShard, min, max, numChunks}. */
static void log_runs(const coll_chunks_t *cc, const char *shard, const run_t *runs, int nruns)
{
    const char *ns = sbl_doc_utf8(&cc->coll, "_id");
    uint32_t minor = cc->minor;
    for (int r = 0; ns != NULL && r < nruns; r++) {
        bson_t det = BSON_INITIALIZER, first, last, min, max;
        chunk_at(&cc->chunks, runs[r].first, &first);
        chunk_at(&cc->chunks, runs[r].first + runs[r].n - 1, &last);
        append_cv(&det, "prevPlacementVersion", cc, cc->major, minor);
        append_cv(&det, "mergedVersion", cc, cc->major, ++minor);
        BSON_APPEND_UTF8(&det, "owningShard", shard);
        if (mig_doc_of(&first, "min", &min) && mig_doc_of(&last, "max", &max)) {
            BSON_APPEND_DOCUMENT(&det, "min", &min);
            BSON_APPEND_DOCUMENT(&det, "max", &max);
        }
        BSON_APPEND_INT32(&det, "numChunks", (int32_t)runs[r].n);
        sbl_cmd_changelog("merge", ns, &det);
        bson_destroy(&det);
    }
}

#define TXN_TRIES 5

/* The reply's n is want; else ConflictingOperationInProgress (the chunks
 * changed since they were read). */
static int check_n(const bson_t *reply, int64_t want, sbl_err_t *err)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, reply, "n") && bson_iter_as_int64(&it) == want)
        return 0;
    return sbl_err_set(err, SBL_E_ConflictingOperationInProgress, "could not merge chunks: "
                       "they changed while the merge was being prepared (a concurrent split, "
                       "merge or migration)");
}

/* Run up then del (config.chunks writes, each statement matching a chunk as
 * it was read: nup updated and ndel deleted) as one transaction of a new
 * session; 0, or the first error (the transaction then aborted). */
static int run_txn(const bson_t *up_body, int64_t nup, const bson_t *del_body, int64_t ndel,
                   sbl_err_t *err)
{
    uint8_t lsid[16];
    if (getrandom(lsid, sizeof(lsid), 0) != (ssize_t)sizeof(lsid))
        return sbl_err_set(err, SBL_E_InternalError, "no random bytes for a session id");
    lsid[6] = (uint8_t)((lsid[6] & 0x0f) | 0x40);
    lsid[8] = (uint8_t)((lsid[8] & 0x3f) | 0x80);
    bson_t up, del, commit = BSON_INITIALIZER, reply;
    bson_copy_to(up_body, &up);
    bson_copy_to(del_body, &del);
    session_fields(&up, lsid, true);
    session_fields(&del, lsid, false);
    BSON_APPEND_INT32(&commit, "commitTransaction", 1);
    session_fields(&commit, lsid, false);
    int rc = sbl_cmd_run_checked("config", &up, &reply, err);
    if (rc == 0)
        rc = check_n(&reply, nup, err);
    bson_destroy(&reply);
    if (rc == 0) {
        rc = sbl_cmd_run_checked("config", &del, &reply, err);
        if (rc == 0)
            rc = check_n(&reply, ndel, err);
        bson_destroy(&reply);
    }
    if (rc == 0) {
        rc = sbl_cmd_run_checked("admin", &commit, &reply, err);
        bson_destroy(&reply);
    } else {
        bson_t abort = BSON_INITIALIZER;
        sbl_err_t e = {0};
        BSON_APPEND_INT32(&abort, "abortTransaction", 1);
        session_fields(&abort, lsid, false);
        sbl_cmd_run_checked("admin", &abort, &reply, &e);
        bson_destroy(&reply);
        bson_destroy(&abort);
    }
    bson_t end = BSON_INITIALIZER, a, l;
    sbl_err_t e = {0};
    BSON_APPEND_ARRAY_BEGIN(&end, "endSessions", &a);
    BSON_APPEND_DOCUMENT_BEGIN(&a, "0", &l);
    BSON_APPEND_BINARY(&l, "id", BSON_SUBTYPE_UUID, lsid, 16);
    bson_append_document_end(&a, &l);
    bson_append_array_end(&end, &a);
    sbl_cmd_run_checked("admin", &end, &reply, &e);
    bson_destroy(&reply);
    bson_destroy(&end);
    bson_destroy(&up);
    bson_destroy(&del);
    bson_destroy(&commit);
    return rc;
}

/*
 * Rewrite cc's chunks for runs[nruns] of shard in one transaction: each
 * run's first chunk takes the run's max, the collection's next minor version
 * (one per run, in order) and a history of one entry; the others go (a
 * write conflict tries again, TXN_TRIES times in all).  Then waits for a
 * majority of the config servers.  *minorp: the last minor
 * version given (the major stays the collection's).
 */
static int commit_runs(const coll_chunks_t *cc, const char *shard, const run_t *runs,
                       int nruns, uint32_t *minorp, sbl_err_t *err)
{
    bson_t up = BSON_INITIALIZER, del = BSON_INITIALIZER, ups, dels;
    BSON_APPEND_UTF8(&up, "update", "chunks");
    BSON_APPEND_ARRAY_BEGIN(&up, "updates", &ups);
    BSON_APPEND_UTF8(&del, "delete", "chunks");
    BSON_APPEND_ARRAY_BEGIN(&del, "deletes", &dels);
    uint32_t minor = cc->minor, nids = 0;
    char key[16];
    for (int r = 0; r < nruns; r++) {
        bson_t first, last, u, uq, uu, set, hist, h, max;
        bson_iter_t id;
        uint64_t since = 0;
        for (uint32_t k = 0; k < runs[r].n; k++) {
            bson_t c, d, q, cmax;
            bson_iter_t cid;
            if (!chunk_at(&cc->chunks, runs[r].first + k, &c))
                continue;
            uint64_t s = chunk_since(&c);
            if (s > since)
                since = s;
            if (k > 0 && bson_iter_init_find(&cid, &c, "_id")) { /* as it was read */
                snprintf(key, sizeof(key), "%u", nids++);
                BSON_APPEND_DOCUMENT_BEGIN(&dels, key, &d);
                BSON_APPEND_DOCUMENT_BEGIN(&d, "q", &q);
                sbl_append_value(&q, "_id", 3, bson_iter_value(&cid));
                if (mig_doc_of(&c, "max", &cmax))
                    BSON_APPEND_DOCUMENT(&q, "max", &cmax);
                BSON_APPEND_UTF8(&q, "shard", shard);
                bson_append_document_end(&d, &q);
                BSON_APPEND_INT32(&d, "limit", 1);
                bson_append_document_end(&dels, &d);
            }
        }
        if (since == 0)
            since = 1; /* Timestamp(0, 1): always on this shard */
        chunk_at(&cc->chunks, runs[r].first, &first);
        chunk_at(&cc->chunks, runs[r].first + runs[r].n - 1, &last);
        mig_doc_of(&last, "max", &max);
        bson_iter_init_find(&id, &first, "_id");
        snprintf(key, sizeof(key), "%d", r);
        BSON_APPEND_DOCUMENT_BEGIN(&ups, key, &u);
        bson_t fmax;
        BSON_APPEND_DOCUMENT_BEGIN(&u, "q", &uq); /* the chunk as it was read */
        sbl_append_value(&uq, "_id", 3, bson_iter_value(&id));
        if (mig_doc_of(&first, "max", &fmax))
            BSON_APPEND_DOCUMENT(&uq, "max", &fmax);
        BSON_APPEND_UTF8(&uq, "shard", shard);
        bson_append_document_end(&u, &uq);
        BSON_APPEND_DOCUMENT_BEGIN(&u, "u", &uu);
        BSON_APPEND_DOCUMENT_BEGIN(&uu, "$set", &set);
        BSON_APPEND_DOCUMENT(&set, "max", &max);
        BSON_APPEND_TIMESTAMP(&set, "lastmod", cc->major, ++minor);
        BSON_APPEND_TIMESTAMP(&set, "onCurrentShardSince", (uint32_t)(since >> 32),
                              (uint32_t)since);
        BSON_APPEND_ARRAY_BEGIN(&set, "history", &hist);
        BSON_APPEND_DOCUMENT_BEGIN(&hist, "0", &h);
        BSON_APPEND_TIMESTAMP(&h, "validAfter", (uint32_t)(since >> 32), (uint32_t)since);
        BSON_APPEND_UTF8(&h, "shard", shard);
        bson_append_document_end(&hist, &h);
        bson_append_array_end(&set, &hist);
        bson_append_document_end(&uu, &set);
        bson_append_document_end(&u, &uu);
        bson_append_document_end(&ups, &u);
    }
    bson_append_array_end(&up, &ups);
    bson_append_array_end(&del, &dels);
    int rc = 0;
    for (int attempt = 0; attempt < TXN_TRIES; attempt++) {
        if (attempt > 0) { /* a write conflict (a router's split): again, as mongod's txn API */
            struct timespec pause = {0, 10000000L << attempt};
            nanosleep(&pause, NULL);
            sbl_err_clear(err);
        }
        rc = run_txn(&up, nruns, &del, nids, err);
        if (rc != SBL_E_WriteConflict && rc != SBL_E_NoSuchTransaction)
            break;
    }
    bson_destroy(&up);
    bson_destroy(&del);
    if (rc == 0)
        rc = mig_await_majority(60000, "waiting for the merge to reach a majority of the "
                                "config servers", err);
    if (rc == 0)
        log_runs(cc, shard, runs, nruns);
    *minorp = minor;
    return rc;
}

/* Ask shard's primary to re-read ns's chunks now (it would at its next
 * version check otherwise). */
static void flush_shard(const char *shard, const char *ns)
{
    bson_t f = BSON_INITIALIZER, arr, cmd = BSON_INITIALIZER, reply;
    bson_iter_t it;
    sbl_err_t e = {0};
    BSON_APPEND_UTF8(&f, "_id", shard);
    if (sbl_cmd_config_find("shards", &f, NULL, &arr, &e) == 0 && bson_iter_init(&it, &arr) &&
        bson_iter_next(&it)) {
        bson_t s;
        const char *host;
        if (sbl_iter_doc(&it, &s) && (host = sbl_doc_utf8(&s, "host")) != NULL) {
            BSON_APPEND_UTF8(&cmd, "_flushRoutingTableCacheUpdates", ns);
            sbl_shard_remote_check(host, "admin", &cmd, &reply, &e); /* it re-reads later else */
            bson_destroy(&reply); /* initialised either way (an ok: 0 reply too) */
        }
    }
    bson_destroy(&arr);
    bson_destroy(&f);
    bson_destroy(&cmd);
}

static void append_version(bson_t *reply, const coll_chunks_t *cc, uint32_t minor)
{
    append_cv(reply, "shardVersion", cc, cc->major, minor);
}

static int shard_busy(const char *shard, sbl_err_t *err)
{
    if (sbl_cmd_shard_migrating(shard))
        return sbl_err_set(err, SBL_E_ConflictingOperationInProgress, "could not merge chunks: "
                           "shard %s is in a migration", shard);
    return 0;
}

int sbl_cmd_configsvr_commit_chunks_merge(sbl_opctx_t *ctx, sbl_err_t *err)
{
    int rc = sbl_cmd_config_primary_check(err);
    if (rc != 0)
        return rc;
    const char *ns = sbl_doc_utf8(ctx->cmd, "_configsvrCommitChunksMerge");
    const char *shard = sbl_doc_utf8(ctx->cmd, "shard");
    bson_t range, min, max;
    if (ns == NULL || shard == NULL || !mig_doc_of(ctx->cmd, "chunkRange", &range) ||
        !mig_doc_of(&range, "min", &min) || !mig_doc_of(&range, "max", &max))
        return sbl_err_set(err, SBL_E_BadValue, "_configsvrCommitChunksMerge needs a "
                           "namespace, shard and chunkRange {min, max}");
    char *lj = bson_as_relaxed_extended_json(&min, NULL), *hj = bson_as_relaxed_extended_json(&max, NULL);
    char what[600];
    snprintf(what, sizeof(what), "could not merge chunks, shard %s does not contain a sequence "
             "of chunks that exactly fills the range [%s, %s)", shard, lj ? lj : "", hj ? hj : "");
    bson_free(lj);
    bson_free(hj);
    sbl_cmd_chunks_lock(true);
    coll_chunks_t cc;
    run_t run = {0, 0};
    bool found_min = false, done = false;
    if ((rc = cc_read(ns, &cc, err)) == 0 && (rc = shard_busy(shard, err)) == 0) {
        /* the chunks of shard from min on, each starting where the last ended */
        bson_iter_t it;
        uint32_t i = 0;
        bson_t prev_max = BSON_INITIALIZER;
        bson_iter_init(&it, &cc.chunks);
        for (; bson_iter_next(&it); i++) {
            bson_t c, cmin, cmax;
            const char *sh;
            if (!sbl_iter_doc(&it, &c) || !mig_doc_of(&c, "min", &cmin) ||
                !mig_doc_of(&c, "max", &cmax) || (sh = sbl_doc_utf8(&c, "shard")) == NULL)
                continue;
            if (!found_min) {
                if (sbl_doc_compare(&cmin, &min) != 0)
                    continue;
                if (strcmp(sh, shard) != 0)
                    break;
                found_min = true;
                run.first = i;
            } else if (strcmp(sh, shard) != 0 || sbl_doc_compare(&cmin, &prev_max) != 0) {
                break; /* another shard's chunk, or a hole */
            }
            run.n++;
            bson_reinit(&prev_max);
            bson_concat(&prev_max, &cmax);
            int cmp = sbl_doc_compare(&cmax, &max);
            if (cmp >= 0) {
                done = cmp == 0;
                break;
            }
        }
        bson_destroy(&prev_max);
        if (!done)
            rc = sbl_err_set(err, SBL_E_IllegalOperation, "%s", what);
    }
    uint32_t minor = cc.minor;
    if (rc == 0 && run.n > 1) {
        rc = commit_runs(&cc, shard, &run, 1, &minor, err);
        if (rc == 0)
            merge_log("merged %u chunks of %s on %s into one, at version %u|%u", run.n, ns, shard,
                      cc.major, minor);
    }
    sbl_cmd_chunks_lock(false);
    if (rc == 0) {
        if (run.n > 1)
            flush_shard(shard, ns);
        append_version(ctx->reply, &cc, minor);
    }
    cc_free(&cc);
    return rc;
}

/*
 * The runs of mergeable chunks of shard in cc (at most max_chunks chunks in
 * all, 0: no limit) into runs (*nrunsp of them); oldest: the newest
 * onCurrentShardSince a mergeable chunk may have (0: any).
 */
static void find_runs(const coll_chunks_t *cc, const char *shard, uint64_t oldest,
                      int64_t max_chunks, run_t *runs, int *nrunsp)
{
    bson_iter_t it;
    bson_t prev_max = BSON_INITIALIZER;
    uint32_t i = 0;
    int64_t taken = 0;
    run_t cur = {0, 0};
    int nruns = 0;
    bson_iter_init(&it, &cc->chunks);
    for (; bson_iter_next(&it) && nruns < MAX_RUNS; i++) {
        bson_t c, cmin, cmax;
        const char *sh;
        bool ok = sbl_iter_doc(&it, &c) && mig_doc_of(&c, "min", &cmin) &&
                  mig_doc_of(&c, "max", &cmax) && (sh = sbl_doc_utf8(&c, "shard")) != NULL &&
                  strcmp(sh, shard) == 0 && !sbl_chunk_is_jumbo(&c) &&
                  (oldest == 0 || chunk_since(&c) < oldest);
        if (!ok || (cur.n > 0 && sbl_doc_compare(&cmin, &prev_max) != 0)) {
            if (cur.n > 1) {
                runs[nruns++] = cur;
                taken += cur.n;
            }
            cur.n = 0;
        }
        if (!ok)
            continue;
        if (cur.n == 0)
            cur.first = i;
        cur.n++;
        bson_reinit(&prev_max);
        bson_concat(&prev_max, &cmax);
        if (max_chunks > 0 && taken + cur.n >= max_chunks)
            break;
    }
    if (cur.n > 1 && nruns < MAX_RUNS)
        runs[nruns++] = cur;
    bson_destroy(&prev_max);
    *nrunsp = nruns;
}

/* The oldest onCurrentShardSince a mergeable chunk may not reach: now less
 * the history window, as mongod 7.0 has it: the longest of
 * minSnapshotHistoryWindowInSeconds, transactionLifetimeLimitSeconds and
 * 10 s (now: the wall clock, or the cluster time when that is ahead; an
 * idle member's cluster time stands still). */
static uint64_t history_cutoff(void)
{
    uint64_t secs = sbl_repl_clock_now() >> 32, window = (uint64_t)sbl_repl_snapshot_window_s();
    if (window < (uint64_t)sbl_cmd_mtxn_lifetime_s())
        window = (uint64_t)sbl_cmd_mtxn_lifetime_s();
    if (window < 10)
        window = 10;
    if (secs < (uint64_t)time(NULL))
        secs = (uint64_t)time(NULL);
    return secs > window ? (secs - window) << 32 : 1;
}

/* mergeAllChunksOnShard's work: *nmergedp chunks merged (into fewer). */
static int merge_all(const char *ns, const char *shard, int64_t max_chunks, bson_t *reply,
                     int *nmergedp, sbl_err_t *err)
{
    static run_t runs[MAX_RUNS]; /* under the chunk lock */
    *nmergedp = 0;
    sbl_cmd_chunks_lock(true);
    coll_chunks_t cc;
    int rc = cc_read(ns, &cc, err), nruns = 0;
    if (rc == 0)
        rc = shard_busy(shard, err);
    if (rc == 0)
        find_runs(&cc, shard, history_cutoff(), max_chunks, runs, &nruns);
    uint32_t minor = cc.minor;
    if (rc == 0 && nruns > 0)
        rc = commit_runs(&cc, shard, runs, nruns, &minor, err);
    for (int r = 0; rc == 0 && r < nruns; r++)
        *nmergedp += (int)runs[r].n;
    sbl_cmd_chunks_lock(false);
    if (rc == 0 && nruns > 0) {
        merge_log("merged %d chunks of %s on %s into %d", *nmergedp, ns, shard, nruns);
        flush_shard(shard, ns);
    }
    if (rc == 0 && reply != NULL)
        append_version(reply, &cc, minor);
    cc_free(&cc);
    return rc;
}

int sbl_cmd_configsvr_merge_all_chunks(sbl_opctx_t *ctx, sbl_err_t *err)
{
    int rc = sbl_cmd_config_primary_check(err);
    if (rc != 0)
        return rc;
    const char *ns = sbl_doc_utf8(ctx->cmd, "_configsvrCommitMergeAllChunksOnShard");
    const char *shard = sbl_doc_utf8(ctx->cmd, "shard");
    if (ns == NULL || shard == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "_configsvrCommitMergeAllChunksOnShard needs a "
                           "namespace and a shard");
    bson_iter_t it;
    int64_t max_chunks = 0;
    if (bson_iter_init_find(&it, ctx->cmd, "maxNumberOfChunksToMerge"))
        max_chunks = bson_iter_as_int64(&it);
    int n;
    rc = merge_all(ns, shard, max_chunks, ctx->reply, &n, err);
    if (rc == 0)
        BSON_APPEND_INT32(ctx->reply, "numMergedChunks", n);
    return rc;
}

int sbl_cmd_configsvr_clear_jumbo_flag(sbl_opctx_t *ctx, sbl_err_t *err)
{
    int rc = sbl_cmd_config_primary_check(err);
    if (rc != 0)
        return rc;
    const char *ns = sbl_doc_utf8(ctx->cmd, "_configsvrClearJumboFlag");
    bson_t min, max;
    if (ns == NULL || !mig_doc_of(ctx->cmd, "minKey", &min) || !mig_doc_of(ctx->cmd, "maxKey", &max))
        return sbl_err_set(err, SBL_E_BadValue, "_configsvrClearJumboFlag needs a namespace, "
                           "minKey and maxKey");
    sbl_cmd_chunks_lock(true);
    coll_chunks_t cc;
    bool found = false;
    if ((rc = cc_read(ns, &cc, err)) == 0) {
        bson_iter_t it;
        bson_iter_init(&it, &cc.chunks);
        while (bson_iter_next(&it)) {
            bson_t c, cmin, cmax;
            bson_iter_t id;
            if (!sbl_iter_doc(&it, &c) || !mig_doc_of(&c, "min", &cmin) ||
                !mig_doc_of(&c, "max", &cmax) || sbl_doc_compare(&cmin, &min) != 0 ||
                sbl_doc_compare(&cmax, &max) != 0 || !bson_iter_init_find(&id, &c, "_id"))
                continue;
            found = true;
            if (!sbl_chunk_is_jumbo(&c))
                break; /* nothing to clear */
            bson_t op = BSON_INITIALIZER, q, u, set, unset;
            BSON_APPEND_DOCUMENT_BEGIN(&op, "q", &q);
            sbl_append_value(&q, "_id", 3, bson_iter_value(&id));
            bson_append_document_end(&op, &q);
            BSON_APPEND_DOCUMENT_BEGIN(&op, "u", &u);
            BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
            BSON_APPEND_TIMESTAMP(&set, "lastmod", cc.major + 1, 0);
            bson_append_document_end(&u, &set);
            BSON_APPEND_DOCUMENT_BEGIN(&u, "$unset", &unset);
            BSON_APPEND_UTF8(&unset, "jumbo", "");
            bson_append_document_end(&u, &unset);
            bson_append_document_end(&op, &u);
            rc = sbl_zone_config_write("update", "chunks", &op, NULL, err);
            bson_destroy(&op);
            if (rc == 0)
                merge_log("cleared the jumbo flag of a chunk of %s", ns);
            break;
        }
        if (rc == 0 && !found) {
            char *lj = bson_as_relaxed_extended_json(&min, NULL);
            char *hj = bson_as_relaxed_extended_json(&max, NULL);
            rc = sbl_err_set(err, 51262, "Unable to locate chunk [%s, %s) from ns: %s",
                             lj ? lj : "", hj ? hj : "", ns);
            bson_free(lj);
            bson_free(hj);
        }
    }
    sbl_cmd_chunks_lock(false);
    cc_free(&cc);
    return rc;
}

/* ---- the AutoMerger ---- */

int sbl_cmd_automerge_set_parameter(const char *k, const bson_iter_t *it, bson_t *reply,
                                    sbl_err_t *err)
{
    if (strcmp(k, "autoMergerIntervalSecs") != 0)
        return -1;
    const char *s = BSON_ITER_HOLDS_UTF8(it) ? bson_iter_utf8(it, NULL) : NULL;
    char *end = NULL;
    long long n = s != NULL ? strtoll(s, &end, 10) : bson_iter_as_int64(it);
    if ((s != NULL && (end == s || *end != '\0')) || (s == NULL && !BSON_ITER_HOLDS_NUMBER(it)) ||
        n < 1)
        return sbl_err_set(err, SBL_E_BadValue, "Invalid value for autoMergerIntervalSecs: it "
                           "must be at least 1");
    if (reply != NULL)
        BSON_APPEND_INT64(reply, "was", atomic_load(&automerge_interval_s));
    atomic_store(&automerge_interval_s, n);
    return 0;
}

void sbl_cmd_automerge_append_parameter(bson_t *reply)
{
    BSON_APPEND_INT32(reply, "autoMergerIntervalSecs", (int32_t)atomic_load(&automerge_interval_s));
}

/* config.settings {_id: "automerge"} does not say enabled: false. */
static bool automerge_enabled(void)
{
    bson_t f = BSON_INITIALIZER, arr;
    bson_iter_t it, e;
    sbl_err_t err = {0};
    bool on = true;
    BSON_APPEND_UTF8(&f, "_id", "automerge");
    if (sbl_cmd_config_find("settings", &f, NULL, &arr, &err) == 0 && bson_iter_init(&it, &arr) &&
        bson_iter_next(&it) && bson_iter_recurse(&it, &e) && bson_iter_find(&e, "enabled") &&
        !bson_iter_as_bool(&e))
        on = false;
    bson_destroy(&arr);
    bson_destroy(&f);
    return on;
}

void sbl_cmd_automerge_tick(char ids[][128], int nshards)
{
    static int64_t last_s;
    int64_t now = (int64_t)time(NULL);
    if (now - last_s < atomic_load(&automerge_interval_s) || !automerge_enabled())
        return;
    last_s = now;
    bson_t empty = BSON_INITIALIZER, colls;
    sbl_err_t e = {0};
    if (sbl_cmd_config_find("collections", &empty, NULL, &colls, &e) == 0) {
        bson_iter_t it, f;
        bson_iter_init(&it, &colls);
        while (bson_iter_next(&it)) {
            bson_t c;
            const char *ns;
            if (!sbl_iter_doc(&it, &c) || (ns = sbl_doc_utf8(&c, "_id")) == NULL ||
                (bson_iter_init_find(&f, &c, "dropped") && bson_iter_as_bool(&f)) ||
                (bson_iter_init_find(&f, &c, "noBalance") && bson_iter_as_bool(&f)) ||
                (bson_iter_init_find(&f, &c, "enableAutoMerge") && !bson_iter_as_bool(&f)))
                continue;
            for (int s = 0; s < nshards; s++) {
                int n;
                sbl_err_clear(&e);
                if (merge_all(ns, ids[s], 0, NULL, &n, &e) != 0 &&
                    e.code != SBL_E_ConflictingOperationInProgress)
                    merge_log("the AutoMerger could not merge %s's chunks on %s: %s", ns, ids[s],
                              e.msg);
            }
        }
    }
    bson_destroy(&colls);
    bson_destroy(&empty);
}
