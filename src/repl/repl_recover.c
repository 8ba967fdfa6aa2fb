/*
 * repl_recover.c: bringing a member's data back in line with its oplog.
 *
 * Start-up recovery (as mongod's replication recovery): a member's
 * replicated collections are unlogged WiredTiger tables, so after a
 * restart they hold what the stable checkpoint held (the majority commit
 * point when it was taken); the oplog, logged, holds every entry.  The
 * entries after the checkpoint's stable timestamp are applied again, each
 * at its own ts, without being written to the oplog a second time.
 *
 * What must stay true: replay is idempotent (inserts and updates are
 * upserting replacements by _id, deletes by _id, catalog changes already
 * made fail harmlessly), and it ends before the member serves anyone.
 */
#include "repl/repl_int.h"

#include <errno.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "op/op.h"

#define rs sbl_rs
#define REPLAY_BATCH 256
/* How long a rollback waits for the client operations it ended to leave. */
#define ROLLBACK_OPS_WAIT_MS 10000

/* Copy up to max entries with ts > after from our oplog into docs. */
static int read_after(sbl_session_t *s, uint64_t after, bson_t **docs, int max, int *np,
                      sbl_err_t *err)
{
    sbl_coll_t *oplog = sbl_oplog_coll();
    bson_value_t lo = {.value_type = BSON_TYPE_TIMESTAMP};
    lo.value.v_timestamp.timestamp = SBL_TS_SECS(after);
    lo.value.v_timestamp.increment = SBL_TS_INC(after);
    sbl_scan_bounds_t b = {.lo = after != 0 ? &lo : NULL, .lo_inclusive = false};
    sbl_scan_t *scan;
    int rc = 0;

    *np = 0;
    if (oplog == NULL)
        return 0;
    SBL_RET(sbl_scan_open(s, oplog, &b, false, &scan, err));
    while (*np < max) {
        bson_t doc;
        bool done;
        if ((rc = sbl_scan_next(scan, &doc, &done, err)) != 0 || done)
            break;
        docs[(*np)++] = bson_copy(&doc);
    }
    sbl_scan_close(scan);
    return rc;
}

uint64_t sbl_repl_entry_ts(const bson_t *doc)
{
    bson_iter_t it;
    uint32_t t = 0, i = 0;
    if (bson_iter_init_find(&it, doc, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it))
        bson_iter_timestamp(&it, &t, &i);
    return SBL_TS(t, i);
}

int sbl_rs_replay_oplog(sbl_err_t *err)
{
    return sbl_rs_replay_oplog_from(sbl_storage_recovery_ts(), err);
}

int sbl_rs_replay_oplog_from(uint64_t from, sbl_err_t *err)
{
    sbl_session_t *s = sbl_session_get();
    uint64_t pos = from;
    int64_t n = 0, start_ms = sbl_now_ms();
    bson_t *docs[REPLAY_BATCH];
    int nd = 0, rc = 0;

    if (sbl_oplog_coll() == NULL || sbl_oplog_last_ts() <= from)
        return 0;
    bson_t attr = BSON_INITIALIZER;
    bson_append_timestamp(&attr, "stableTimestamp", -1, SBL_TS_SECS(from), SBL_TS_INC(from));
    bson_append_timestamp(&attr, "topOfOplog", -1, SBL_TS_SECS(sbl_oplog_last_ts()),
                          SBL_TS_INC(sbl_oplog_last_ts()));
    sbl_log(SBL_LOG_INFO, "REPL", 21544, from != 0
            ? "Recovering from stable timestamp: replaying the oplog after it"
            : "No stable checkpoint: replaying the whole oplog", &attr);
    bson_destroy(&attr);
    sbl_repl_replaying = true;
    while (rc == 0 && (rc = read_after(s, pos, docs, REPLAY_BATCH, &nd, err)) == 0 && nd > 0) {
        for (int i = 0; i < nd; i++) {
            if (rc == 0)
                rc = sbl_rs_apply_entry(docs[i], err);
            pos = sbl_repl_entry_ts(docs[i]);
            bson_destroy(docs[i]);
        }
        n += nd;
    }
    sbl_repl_replaying = false;
    bson_init(&attr);
    BSON_APPEND_INT64(&attr, "entries", n);
    BSON_APPEND_INT64(&attr, "durationMillis", sbl_now_ms() - start_ms);
    sbl_log(SBL_LOG_INFO, "REPL", 21536, "Completed oplog application for recovery", &attr);
    bson_destroy(&attr);
    return rc;
}

/* ---- rollback (recover to a timestamp, as mongod 4.0+) -------------------------- */

/*
 * A member whose last entry is not in its sync source's oplog wrote
 * entries the majority never had (a former primary's w:1 writes).  It
 * finds the newest entry both oplogs hold (the common point: same ts and
 * term), saves the current version of every document its own later entries
 * inserted or updated to dbpath/rollback/<db>.<coll>/removed.<time>.bson,
 * sets WiredTiger's stable timestamp back to the common point and rolls the
 * unlogged tables back to it, undoes the catalog changes it can (a create:
 * the collection is dropped; createIndexes: the index), deletes its oplog
 * entries after the common point and resumes syncing from there.  A
 * transaction still prepared at the common point moves the recovery back to
 * before its prepare entry; the replay from there to the common point
 * prepares it again (as mongod's reconstruction of prepared transactions).
 *
 * What must stay true: nothing is changed before every later entry has
 * been checked to be undoable; the common point is never older than the
 * stable timestamp (majority-committed entries are never rolled back).
 */

static uint64_t iter_ts(bson_iter_t *it)
{
    uint32_t t = 0, i = 0;
    if (BSON_ITER_HOLDS_TIMESTAMP(it))
        bson_iter_timestamp(it, &t, &i);
    return SBL_TS(t, i);
}

static sbl_optime_t optime_of(const bson_t *doc)
{
    bson_iter_t it;
    sbl_optime_t o = {0, 0};
    if (bson_iter_init_find(&it, doc, "ts"))
        o.ts = iter_ts(&it);
    if (bson_iter_init_find(&it, doc, "t") && BSON_ITER_HOLDS_NUMBER(&it))
        o.t = bson_iter_as_int64(&it);
    return o;
}

/* Walk both oplogs from the newest entries down (mongod's common point
 * resolver); *foundp false when the source holds nothing of ours. */
static int find_common_point(mongoc_client_t *c, sbl_optime_t last, sbl_optime_t *cp,
                             bool *foundp, bool *too_stalep, sbl_err_t *err)
{
    sbl_session_t *s = sbl_session_get();
    bson_value_t hi = {.value_type = BSON_TYPE_TIMESTAMP};
    hi.value.v_timestamp.timestamp = SBL_TS_SECS(last.ts);
    hi.value.v_timestamp.increment = SBL_TS_INC(last.ts);
    sbl_scan_bounds_t b = {.hi = &hi, .hi_inclusive = true};
    sbl_scan_t *scan;
    bson_t filter = BSON_INITIALIZER, lte, opts = BSON_INITIALIZER, sort;
    bson_error_t error;
    const bson_t *theirs_doc;
    int rc = 0;

    *foundp = false;
    *too_stalep = false;
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "ts", &lte);
    bson_append_timestamp(&lte, "$lte", 4, SBL_TS_SECS(last.ts), SBL_TS_INC(last.ts));
    bson_append_document_end(&filter, &lte);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, "$natural", -1);
    bson_append_document_end(&opts, &sort);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &sort);
    BSON_APPEND_INT32(&sort, "ts", 1);
    BSON_APPEND_INT32(&sort, "t", 1);
    bson_append_document_end(&opts, &sort);
    mongoc_collection_t *ol = mongoc_client_get_collection(c, "local", "oplog.rs");
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(ol, &filter, &opts, NULL);
    if ((rc = sbl_scan_open(s, sbl_oplog_coll(), &b, true, &scan, err)) != 0)
        goto out;
    bson_t ours_doc;
    bool done = false, have_theirs = mongoc_cursor_next(cur, &theirs_doc);
    if (!have_theirs)
        *too_stalep = true; /* nothing at or before our last entry */
    if ((rc = sbl_scan_next(scan, &ours_doc, &done, err)) != 0)
        goto close;
    while (have_theirs && !done) {
        sbl_optime_t ours = optime_of(&ours_doc), theirs = optime_of(theirs_doc);
        if (theirs.ts > ours.ts) {
            have_theirs = mongoc_cursor_next(cur, &theirs_doc);
        } else if (ours.ts > theirs.ts) {
            if ((rc = sbl_scan_next(scan, &ours_doc, &done, err)) != 0)
                break;
        } else if (ours.t == theirs.t) {
            *cp = ours;
            *foundp = true;
            break;
        } else {
            have_theirs = mongoc_cursor_next(cur, &theirs_doc);
            if ((rc = sbl_scan_next(scan, &ours_doc, &done, err)) != 0)
                break;
        }
    }
    if (rc == 0 && mongoc_cursor_error(cur, &error))
        rc = sbl_err_set(err, SBL_E_HostUnreachable, "reading the sync source's oplog: %s",
                         error.message);
close:
    sbl_scan_close(scan);
out:
    mongoc_cursor_destroy(cur);
    mongoc_collection_destroy(ol);
    bson_destroy(&filter);
    bson_destroy(&opts);
    return rc;
}

/* What one of our entries after the common point did, for the checks and
 * the rollback files. */
typedef struct undo_key {
    char *ns;
    bson_t *id; /* {_id: value} */
} undo_key_t;

static int undo_key_cmp(const void *a, const void *b)
{
    const undo_key_t *x = a, *y = b;
    int c = strcmp(x->ns, y->ns);
    if (c != 0)
        return c;
    if (x->id->len != y->id->len)
        return x->id->len < y->id->len ? -1 : 1;
    return memcmp(bson_get_data(x->id), bson_get_data(y->id), x->id->len);
}

static const char *str_at(const bson_t *d, const char *k)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, d, k) && BSON_ITER_HOLDS_UTF8(&it)
               ? bson_iter_utf8(&it, NULL) : NULL;
}

static bool doc_at(const bson_t *d, const char *k, bson_t *out)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, d, k) && BSON_ITER_HOLDS_DOCUMENT(&it) &&
           sbl_iter_doc(&it, out);
}

/* Which catalog change a "c" entry is ({create: ...} -> "create"). */
/* An insert's or update's document (ns + _id) for the rollback files;
 * other entries note nothing.  Grows *keys as needed. */
static void note_key(undo_key_t **keys, size_t *nk, size_t *cap, const bson_t *e)
{
    const char *op = str_at(e, "op"), *ns = str_at(e, "ns");
    bson_t o, o2;
    bson_iter_t it;
    if (op == NULL || ns == NULL || (op[0] != 'i' && op[0] != 'u'))
        return;
    if (!((doc_at(e, "o2", &o2) && bson_iter_init_find(&it, &o2, "_id")) ||
          (doc_at(e, "o", &o) && bson_iter_init_find(&it, &o, "_id"))))
        return;
    if (*nk + 1 >= *cap) {
        *keys = bson_realloc(*keys, *cap * 2 * sizeof(**keys));
        memset(*keys + *cap, 0, *cap * sizeof(**keys));
        *cap *= 2;
    }
    (*keys)[*nk].ns = bson_strdup(ns);
    (*keys)[*nk].id = bson_new();
    sbl_append_iter((*keys)[*nk].id, "_id", 3, &it);
    (*nk)++;
}

static const char *c_name(const bson_t *e, bson_t *o)
{
    bson_iter_t it;
    if (!doc_at(e, "o", o) || !bson_iter_init(&it, o) || !bson_iter_next(&it))
        return "";
    return bson_iter_key(&it);
}

static void db_of(const char *ns, char *db, size_t n)
{
    const char *dot = strchr(ns, '.');
    size_t dl = dot != NULL ? (size_t)(dot - ns) : strlen(ns);
    snprintf(db, n, "%.*s", (int)(dl < n ? dl : n - 1), ns);
}

/* Write the current version of each document in keys (sorted) to
 * dbpath/rollback/<ns>/removed.<when>.bson; *np counts them. */
static int write_rollback_files(sbl_session_t *s, undo_key_t *keys, size_t nk, int64_t *np,
                                sbl_err_t *err)
{
    char dir[4096], path[4200], when[64];
    time_t now = time(NULL);
    struct tm tm;
    FILE *f = NULL;
    const char *open_ns = NULL;
    sbl_coll_t *coll = NULL;

    gmtime_r(&now, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H-%M-%S.0", &tm);
    *np = 0;
    snprintf(dir, sizeof(dir), "%s/rollback", sbl_rs.dbpath);
    mkdir(dir, 0755);
    for (size_t i = 0; i < nk; i++) {
        if (i > 0 && undo_key_cmp(&keys[i - 1], &keys[i]) == 0)
            continue;
        if (open_ns == NULL || strcmp(open_ns, keys[i].ns) != 0) {
            if (f != NULL && fclose(f) != 0)
                return sbl_err_set(err, SBL_E_InternalError, "writing %s: %s", path,
                                   strerror(errno));
            f = NULL;
            sbl_coll_release(coll);
            coll = NULL;
            open_ns = keys[i].ns;
            sbl_err_t e2;
            sbl_err_clear(&e2);
            if (sbl_coll_open(s, open_ns, false, &coll, NULL, &e2) != 0)
                continue; /* gone since: nothing to save */
            snprintf(path, sizeof(path), "%s/%s", dir, open_ns);
            mkdir(path, 0755);
            snprintf(path, sizeof(path), "%s/%s/removed.%s.bson", dir, open_ns, when);
            if ((f = fopen(path, "ab")) == NULL) {
                sbl_coll_release(coll);
                return sbl_err_set(err, SBL_E_InternalError, "cannot create %s: %s", path,
                                   strerror(errno));
            }
        }
        if (coll == NULL)
            continue;
        bson_iter_t it;
        bson_t doc;
        bool found = false;
        if (!bson_iter_init_find(&it, keys[i].id, "_id"))
            continue;
        if (sbl_coll_get(s, coll, bson_iter_value(&it), &doc, &found, err) != 0) {
            fclose(f);
            sbl_coll_release(coll);
            return -1;
        }
        if (!found)
            continue;
        size_t w = fwrite(bson_get_data(&doc), 1, doc.len, f);
        bson_destroy(&doc);
        if (w != doc.len) {
            fclose(f);
            sbl_coll_release(coll);
            return sbl_err_set(err, SBL_E_InternalError, "writing %s: %s", path,
                               strerror(errno));
        }
        (*np)++;
    }
    sbl_coll_release(coll);
    if (f != NULL && (fflush(f) != 0 || fsync(fileno(f)) != 0 || fclose(f) != 0))
        return sbl_err_set(err, SBL_E_InternalError, "writing %s: %s", path, strerror(errno));
    return 0;
}

/* Delete our oplog's entries (docs, newest last) in a few transactions. */
static int truncate_oplog(sbl_session_t *s, bson_t **docs, size_t n, sbl_err_t *err)
{
    sbl_coll_t *oplog = sbl_oplog_coll();
    for (size_t i = 0; i < n;) {
        SBL_RET(sbl_txn_begin(s, err));
        size_t end = i + 100 < n ? i + 100 : n;
        int rc = 0;
        for (size_t j = n - 1 - i; rc == 0 && i < end; i++, j--)
            rc = sbl_write(s, oplog, SBL_WRITE_DELETE, docs[j], NULL, NULL, err);
        if (rc != 0) {
            sbl_txn_abort(s);
            return rc;
        }
        SBL_RET(sbl_txn_commit(s, err));
    }
    return sbl_oplog_reload_last(s, err);
}

static void log_host_msg(int level, int id, const char *msg, const char *host)
{
    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&attr, "syncSource", host);
    sbl_log(level, "REPL", id, msg, &attr);
    bson_destroy(&attr);
}

static void halt_locked(const char *msg)
{
    sbl_rs.sync_halted = true;
    snprintf(sbl_rs.sync_msg, sizeof(sbl_rs.sync_msg), "%s", msg);
    sbl_rs_set_state_locked(SBL_RS_RECOVERING);
}

/* The ts of the prepare entry that commit or abort entry e decides (its
 * prevOpTime), or 0 when our oplog lacks it. */
static int decided_prepare_ts(sbl_session_t *s, const bson_t *e, uint64_t *tsp, sbl_err_t *err)
{
    bson_t pe;
    bool found;
    *tsp = 0;
    SBL_RET(sbl_repl_prepare_entry_of(s, e, &pe, &found, err));
    if (found) {
        *tsp = sbl_repl_entry_ts(&pe);
        bson_destroy(&pe);
    }
    return 0;
}

int sbl_rs_rollback(mongoc_client_t *c, const char *host, sbl_err_t *err)
{
    sbl_session_t *s = sbl_session_get();
    sbl_optime_t last = sbl_rs_my_applied(), cp = {0, 0};
    bool found, too_stale;
    bson_t **docs = NULL;
    undo_key_t *keys = NULL;
    uint64_t *reprepare = NULL; /* prepare entries (<= cp) of commits/aborts after cp */
    size_t nd = 0, cap = 0, nk = 0, nre = 0;
    int64_t saved = 0, start_ms = sbl_now_ms();
    int rc;

    if ((rc = find_common_point(c, last, &cp, &found, &too_stale, err)) != 0)
        return rc;
    if (!found) {
        pthread_mutex_lock(&rs.lock);
        halt_locked(too_stale ? "too stale to catch up: our last entry is older than the sync "
                                "source's oldest; resync this member"
                              : "no common point with the sync source's oplog; resync "
                                "this member");
        pthread_mutex_unlock(&rs.lock);
        log_host_msg(SBL_LOG_ERROR, 21799, rs.sync_msg, host);
        return sbl_err_set(err, SBL_E_OplogStartMissing, "%s", rs.sync_msg);
    }
    uint64_t stable = sbl_storage_stable_ts();
    if (stable > cp.ts) {
        pthread_mutex_lock(&rs.lock);
        halt_locked("the common point with the sync source is older than our stable "
                    "timestamp: cannot roll back");
        pthread_mutex_unlock(&rs.lock);
        return sbl_err_set(err, SBL_E_UnrecoverableRollbackError, "%s", rs.sync_msg);
    }
    /* Our entries after the common point, oldest first. */
    for (uint64_t pos = cp.ts;;) {
        bson_t *batch[REPLAY_BATCH];
        int nb = 0;
        if ((rc = read_after(s, pos, batch, REPLAY_BATCH, &nb, err)) != 0 || nb == 0)
            break;
        if (nd + (size_t)nb > cap) {
            cap = (nd + (size_t)nb) * 2;
            docs = bson_realloc(docs, cap * sizeof(*docs));
        }
        for (int i = 0; i < nb; i++)
            docs[nd++] = batch[i];
        pos = sbl_repl_entry_ts(batch[nb - 1]);
    }
    if (rc != 0)
        goto out;
    /* Check every entry is undoable; collect the documents to save.  A
     * committed transaction (applyOps) holds only data changes, undone by
     * the recovery to the common point like the others.  A prepared
     * transaction's commit or abort entry is undone by the recovery to
     * before its prepare entry (the replay prepares it again), or with that
     * entry when it is after the common point too. */
    size_t kcap = nd + 1;
    keys = bson_malloc0(kcap * sizeof(*keys));
    reprepare = bson_malloc0(kcap * sizeof(*reprepare));
    for (size_t i = 0; i < nd; i++) {
        const char *op = str_at(docs[i], "op"), *ns = str_at(docs[i], "ns");
        bson_t o;
        bson_iter_t ops;
        if (op == NULL || ns == NULL)
            continue;
        if (op[0] == 'c') {
            int kind = sbl_repl_prepared_kind(docs[i], &o);
            if (kind == SBL_PREP_COMMIT || kind == SBL_PREP_ABORT) {
                uint64_t pts = 0;
                if ((rc = decided_prepare_ts(s, docs[i], &pts, err)) != 0)
                    goto out;
                if (pts > cp.ts) /* undone with its prepare entry */
                    continue;
                if (pts != 0) { /* prepared at the common point: prepared again */
                    reprepare[nre++] = pts;
                    continue;
                }
            }
            const char *name = c_name(docs[i], &o);
            if (strcmp(name, "applyOps") == 0 && bson_iter_init_find(&ops, &o, "applyOps") &&
                BSON_ITER_HOLDS_ARRAY(&ops) && bson_iter_recurse(&ops, &ops)) {
                bool undoable = true;
                while (undoable && bson_iter_next(&ops)) {
                    bson_t inner;
                    const char *iop;
                    undoable = BSON_ITER_HOLDS_DOCUMENT(&ops) && sbl_iter_doc(&ops, &inner) &&
                               (iop = str_at(&inner, "op")) != NULL && iop[0] != 'c';
                    if (undoable)
                        note_key(&keys, &nk, &kcap, &inner);
                }
                if (undoable)
                    continue;
            }
            if (strcmp(name, "create") != 0 && strcmp(name, "createIndexes") != 0 &&
                !(strcmp(name, "collMod") == 0 && !bson_has_field(&o, "index"))) {
                char msg[256];
                snprintf(msg, sizeof(msg), "cannot roll back a %s (%s): resync this member",
                         name, ns);
                pthread_mutex_lock(&rs.lock);
                halt_locked(msg);
                pthread_mutex_unlock(&rs.lock);
                rc = sbl_err_set(err, SBL_E_UnrecoverableRollbackError, "%s", msg);
                goto out;
            }
        } else {
            note_key(&keys, &nk, &kcap, docs[i]);
        }
    }
    for (size_t i = 0; i < nre; i++)
        if (stable >= reprepare[i]) {
            pthread_mutex_lock(&rs.lock);
            halt_locked("our stable timestamp is past the prepare entry of a transaction "
                        "whose commit or abort is rolled back: cannot roll back");
            pthread_mutex_unlock(&rs.lock);
            rc = sbl_err_set(err, SBL_E_UnrecoverableRollbackError, "%s", rs.sync_msg);
            goto out;
        }
    pthread_mutex_lock(&rs.lock);
    sbl_rs_set_state_locked(SBL_RS_ROLLBACK);
    pthread_mutex_unlock(&rs.lock);
    /* the client operations still waiting on a prepared transaction end
     * (11602), reads too: the recovery undoes what they would see */
    sbl_op_note_rollback();
    {
        bson_t attr = BSON_INITIALIZER;
        sbl_repl_append_optime(&attr, "commonPoint", cp.ts, cp.t);
        BSON_APPEND_INT64(&attr, "entriesToUndo", (int64_t)nd);
        BSON_APPEND_UTF8(&attr, "syncSource", host);
        sbl_log(SBL_LOG_INFO, "ROLLBACK", 21612, "Rollback common point found; rolling back "
                "to it (recover to a timestamp)", &attr);
        bson_destroy(&attr);
    }
    qsort(keys, nk, sizeof(*keys), undo_key_cmp);
    /* rollback_to_stable refuses while any WiredTiger transaction is open
     * (mongod's rollback holds the global X lock after killing the user
     * operations): wait for the client operations just ended to leave
     * (bounded: rollback_to_stable's own retries wait for the rest).
     * Prepared transactions hold their writes uncommitted (a read of them
     * conflicts): abort every open one, those a command ran in once it
     * ended, and recover to before the prepare entry of each still prepared
     * at the common point, so the replay up to it prepares them again. */
    int left = sbl_op_wait_rollback_ended(sbl_now_us() + ROLLBACK_OPS_WAIT_MS * 1000);
    if (left > 0) {
        bson_t attr = BSON_INITIALIZER;
        BSON_APPEND_INT32(&attr, "operations", left);
        sbl_log(SBL_LOG_WARNING, "ROLLBACK", 7360402, "Client operations still running at "
                "the rollback; rolling back when their transactions end", &attr);
        bson_destroy(&attr);
    }
    sbl_rs_abort_txns(true);
    if ((rc = write_rollback_files(s, keys, nk, &saved, err)) != 0)
        goto failed;
    sbl_repl_prepared_rollback(cp.ts);
    for (size_t i = 0; i < nre; i++) /* held by its pin already; made sure of here */
        sbl_repl_prepared_pin(reprepare[i]);
    uint64_t recover_ts = sbl_repl_prepared_clamp(cp.ts);
    if ((rc = sbl_storage_rollback_to_stable(recover_ts, err)) != 0)
        goto failed;
    sbl_rs_stable_reset(recover_ts);
    /* Catalog changes are not timestamped: undo them, newest first. */
    for (size_t i = nd; i-- > 0;) {
        const char *op = str_at(docs[i], "op"), *ns = str_at(docs[i], "ns");
        bson_t o;
        if (op == NULL || ns == NULL || op[0] != 'c')
            continue;
        const char *name = c_name(docs[i], &o), *coll = str_at(&o, name);
        char db[128], full[SBL_NS_BUF];
        sbl_err_t e2;
        sbl_err_clear(&e2);
        db_of(ns, db, sizeof(db));
        snprintf(full, sizeof(full), "%s.%s", db, coll != NULL ? coll : "");
        if (strcmp(name, "create") == 0) {
            sbl_coll_drop(s, full, &e2);
        } else if (strcmp(name, "collMod") == 0) { /* back to the options before it */
            bson_t o2, prev, opts = BSON_INITIALIZER;
            bson_iter_t it;
            if (doc_at(docs[i], "o2", &o2) &&
                bson_iter_init_find(&it, &o2, "collectionOptions_old") &&
                sbl_iter_doc(&it, &prev)) {
                bson_copy_to_excluding_noinit(&prev, &opts, "uuid", NULL);
                sbl_coll_set_options(s, full, &opts, &e2);
            }
            bson_destroy(&opts);
        } else {
            const char *ix = str_at(&o, "name");
            sbl_coll_t *h;
            if (ix != NULL && sbl_coll_open(s, full, false, &h, NULL, &e2) == 0) {
                sbl_index_drop(s, h, ix, &e2);
                sbl_coll_release(h);
            }
        }
    }
    if ((rc = truncate_oplog(s, docs, nd, err)) != 0)
        goto failed;
    if (recover_ts < cp.ts && (rc = sbl_rs_replay_oplog_from(recover_ts, err)) != 0)
        goto failed;
    pthread_mutex_lock(&rs.lock);
    sbl_rs_set_state_locked(SBL_RS_SECONDARY);
    sbl_rs_reset_election_timer_locked(sbl_now_ms());
    pthread_mutex_unlock(&rs.lock);
    {
        bson_t attr = BSON_INITIALIZER;
        sbl_repl_append_optime(&attr, "commonPoint", cp.ts, cp.t);
        BSON_APPEND_INT64(&attr, "entriesUndone", (int64_t)nd);
        BSON_APPEND_INT64(&attr, "documentsSaved", saved);
        BSON_APPEND_UTF8(&attr, "rollbackDirectory", "rollback");
        BSON_APPEND_INT64(&attr, "durationMillis", sbl_now_ms() - start_ms);
        sbl_log(SBL_LOG_INFO, "ROLLBACK", 21606, "Rollback complete", &attr);
        bson_destroy(&attr);
    }
    goto out;
failed:
    pthread_mutex_lock(&rs.lock);
    halt_locked("rollback failed: resync this member");
    pthread_mutex_unlock(&rs.lock);
out:
    for (size_t i = 0; i < nd; i++)
        bson_destroy(docs[i]);
    bson_free(docs);
    for (size_t i = 0; i < nk; i++) {
        bson_free(keys[i].ns);
        bson_destroy(keys[i].id);
    }
    bson_free(keys);
    bson_free(reprepare);
    return rc;
}
