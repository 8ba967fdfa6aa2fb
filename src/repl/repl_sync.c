/*
 * repl_sync.c: a secondary pulls.  The applier thread chooses a sync
 * source, has a fetcher thread tail its oplog (repl_fetch.c: find on
 * local.oplog.rs from our last applied ts, tailable, awaitData, the entries
 * queued while we apply), checks that the first entry is our
 * last one (else our history diverged: rollback), and hands each entry to
 * the writer threads (repl_apply.c) or, a command, applies it alone once
 * they are idle.  An entry is applied through the command layer's runner
 * with the entry as the thread's "applying" entry (so the storage observer
 * writes that very entry, with its ts as commit timestamp, in the change's
 * own transaction), and a collection it creates takes the entry's "ui" (every
 * member gives a collection the primary's UUID); the reporter
 * (repl_report.c) sends replSetUpdatePosition once what is applied is
 * journaled.  The primary's side: replSetUpdatePosition, the
 * commit point, and write-concern waiters.
 *
 * What must stay true: entries commit in ts order (one document's are
 * applied in order; repl_apply.c); an entry that changed nothing (replayed)
 * is still written to our oplog; the commit point never moves back; every
 * waiter's callback runs exactly once.
 */
#include "repl/repl_int.h"

#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "storage/storage.h"

#define rs sbl_rs

sbl_repl_run_fn sbl_rs_runner;
static sbl_repl_abort_txns_fn abort_txns;
static pthread_t sync_thread;
static bool sync_running;

void sbl_repl_set_runner(sbl_repl_run_fn fn)
{
    sbl_rs_runner = fn;
}

void sbl_repl_set_txn_aborter(sbl_repl_abort_txns_fn fn)
{
    abort_txns = fn;
}

void sbl_rs_abort_txns(bool rollback)
{
    if (abort_txns != NULL)
        abort_txns(rollback);
}

/* ---- applying one entry ---------------------------------------------------------- */

static const char *coll_of(const char *ns, char *db, size_t n)
{
    const char *dot = strchr(ns, '.');
    size_t dl = dot != NULL ? (size_t)(dot - ns) : strlen(ns);
    snprintf(db, n, "%.*s", (int)(dl < n ? dl : n - 1), ns);
    return dot != NULL ? dot + 1 : "";
}

/* The new document of update entry e logged as diff (o: {$v: 2, diff}):
 * the document of o2's _id as this member holds it, with the diff
 * applied; false when the member has no such document (a replayed entry
 * of a document deleted later) or the entry is malformed. */
static bool diff_post_image(const bson_t *e, const char *ns, const bson_t *diff, bson_t *post)
{
    bson_iter_t it;
    bson_t o2, old;
    sbl_session_t *s = sbl_session_get();
    sbl_coll_t *c = NULL;
    sbl_err_t err;
    bool found = false;
    sbl_err_clear(&err);
    if (s == NULL || !bson_iter_init_find(&it, e, "o2") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !sbl_iter_doc(&it, &o2) || !bson_iter_init_find(&it, &o2, "_id") ||
        sbl_coll_open(s, ns, false, &c, NULL, &err) != 0)
        return false;
    bson_value_t id;
    sbl_iter_value(&it, &id);
    if (sbl_coll_get(s, c, &id, &old, &found, &err) == 0 && found) {
        bson_init(post);
        if (sbl_repl_diff_apply(&old, diff, post, &err) != 0) {
            bson_destroy(post);
            found = false;
        }
        bson_destroy(&old);
    }
    sbl_coll_release(c);
    return found;
}

/* The command that makes entry e's change on this member. */
static bool entry_command(const bson_t *e, char *db, size_t dbn, bson_t *cmd)
{
    bson_iter_t it;
    bson_t o, o2, arr, u;
    const char *op = NULL, *ns = NULL;
    if (bson_iter_init_find(&it, e, "op") && BSON_ITER_HOLDS_UTF8(&it))
        op = bson_iter_utf8(&it, NULL);
    if (bson_iter_init_find(&it, e, "ns") && BSON_ITER_HOLDS_UTF8(&it))
        ns = bson_iter_utf8(&it, NULL);
    if (op == NULL || ns == NULL || !bson_iter_init_find(&it, e, "o") ||
        !BSON_ITER_HOLDS_DOCUMENT(&it) || !sbl_iter_doc(&it, &o))
        return false;
    const char *coll = coll_of(ns, db, dbn);
    bson_iter_t id;
    switch (op[0]) {
    case 'i':
    case 'u': { /* the whole document (an update's, or its diff applied): an upserting
                 * replacement */
        bson_t post, diff;
        bool from_diff = op[0] == 'u' && sbl_repl_entry_diff(&o, &diff);
        if (from_diff && !diff_post_image(e, ns, &diff, &post))
            return false;
        const bson_t *doc = from_diff ? &post : &o;
        if (!bson_iter_init_find(&id, doc, "_id")) {
            if (from_diff)
                bson_destroy(&post);
            return false;
        }
        BSON_APPEND_UTF8(cmd, "update", coll);
        BSON_APPEND_ARRAY_BEGIN(cmd, "updates", &arr);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &u);
        bson_t q;
        BSON_APPEND_DOCUMENT_BEGIN(&u, "q", &q);
        sbl_append_iter(&q, "_id", 3, &id);
        bson_append_document_end(&u, &q);
        BSON_APPEND_DOCUMENT(&u, "u", doc);
        BSON_APPEND_BOOL(&u, "upsert", true);
        bson_append_document_end(&arr, &u);
        bson_append_array_end(cmd, &arr);
        if (from_diff)
            bson_destroy(&post);
        return true;
    }
    case 'd':
        BSON_APPEND_UTF8(cmd, "delete", coll);
        BSON_APPEND_ARRAY_BEGIN(cmd, "deletes", &arr);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &u);
        BSON_APPEND_DOCUMENT(&u, "q", &o);
        BSON_APPEND_INT32(&u, "limit", 1);
        bson_append_document_end(&arr, &u);
        bson_append_array_end(cmd, &arr);
        return true;
    case 'c': {
        bson_iter_t f;
        if (!bson_iter_init(&f, &o) || !bson_iter_next(&f))
            return false;
        const char *name = bson_iter_key(&f);
        if (strcmp(name, "createIndexes") == 0) {
            bson_t spec;
            if (!sbl_rs_self_builds_indexes()) /* buildIndexes: false: the entry alone */
                return false;
            sbl_append_iter(cmd, "createIndexes", -1, &f);
            BSON_APPEND_ARRAY_BEGIN(cmd, "indexes", &arr);
            BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &spec);
            while (bson_iter_next(&f))
                sbl_append_iter(&spec, bson_iter_key(&f), -1, &f);
            bson_append_document_end(&arr, &spec);
            bson_append_array_end(cmd, &arr);
        } else if (strcmp(name, "renameCollection") == 0) {
            snprintf(db, dbn, "admin");
            do
                if (strcmp(bson_iter_key(&f), "stayTemp") != 0)
                    sbl_append_iter(cmd, bson_iter_key(&f), -1, &f);
            while (bson_iter_next(&f));
        } else {
            do
                if (strcmp(bson_iter_key(&f), "idIndex") != 0)
                    sbl_append_iter(cmd, bson_iter_key(&f), -1, &f);
            while (bson_iter_next(&f));
        }
        (void)o2;
        return true;
    }
    default: /* 'n': nothing to change */
        return false;
    }
}

/* Run entry e's command cmd on db through the command layer; a collection
 * the entry creates takes the UUID the entry names it by, as on the
 * primary. */
static void run_entry(const char *db, const bson_t *cmd, const bson_t *e, bson_t *reply)
{
    char ns[SBL_NS_BUF];
    const uint8_t *uuid;
    if (sbl_repl_entry_created_ns(e, ns, sizeof(ns), &uuid))
        sbl_coll_adopt_uuid(ns, uuid);
    sbl_rs_runner(db, cmd, reply);
    sbl_coll_adopt_uuid(NULL, NULL);
}

bool sbl_rs_apply_ops_of(const bson_t *e, bson_iter_t *ops)
{
    bson_iter_t it, o;
    if (!bson_iter_init_find(&it, e, "op") || !BSON_ITER_HOLDS_UTF8(&it) ||
        bson_iter_utf8(&it, NULL)[0] != 'c')
        return false;
    return bson_iter_init_find(&it, e, "o") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
           bson_iter_recurse(&it, &o) && bson_iter_find(&o, "applyOps") &&
           BSON_ITER_HOLDS_ARRAY(&o) && bson_iter_recurse(&o, ops);
}

/* The ts of an entry's prevOpTime (0: none). */
static uint64_t prev_ts_of(const bson_t *e)
{
    bson_iter_t it, p;
    uint32_t t, i;
    if (!bson_iter_init_find(&it, e, "prevOpTime") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &p) || !bson_iter_find(&p, "ts") ||
        !BSON_ITER_HOLDS_TIMESTAMP(&p))
        return 0;
    bson_iter_timestamp(&p, &t, &i);
    return SBL_TS(t, i);
}

/* A large transaction's entry other than its last (o.partialTxn). */
static bool is_partial(const bson_t *e)
{
    bson_iter_t it, o;
    return bson_iter_init_find(&it, e, "o") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
           bson_iter_recurse(&it, &o) && bson_iter_find(&o, "partialTxn") &&
           bson_iter_as_bool(&o);
}

/* Apply the operations of applyOps array ops, the ones of entry in (whose
 * ts keys their pre-images). */
static void run_ops(bson_iter_t *ops, const bson_t *in)
{
    sbl_repl_image_entry = in;
    for (sbl_repl_image_index = 0; bson_iter_next(ops); sbl_repl_image_index++) {
        char db[128];
        bson_t op, cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
        sbl_err_t err;
        sbl_err_clear(&err);
        if (!BSON_ITER_HOLDS_DOCUMENT(ops) || !sbl_iter_doc(ops, &op))
            continue;
        /* A document's insert, replacement or delete by _id straight through
         * storage (repl_crud.c), as a lone entry's; a failed write fails the
         * transaction, as the command's failed write would (sbl_txn_abort). */
        int rc = sbl_rs_apply_txn_op(&op, &err);
        if (rc != 0 && rc != SBL_RS_NOT_DIRECT)
            sbl_txn_outer_fail(sbl_session_get());
        if (rc == SBL_RS_NOT_DIRECT && entry_command(&op, db, sizeof(db), &cmd) &&
            sbl_rs_runner != NULL)
            run_entry(db, &cmd, &op, &reply);
        bson_destroy(&cmd);
        bson_destroy(&reply);
    }
    sbl_repl_image_entry = NULL;
    sbl_repl_image_index = 0;
}

/* The partial entries before a large transaction's last entry e, oldest
 * first (*chainp, *np; none for a transaction of one entry), read back
 * from this member's oplog along the prevOpTime chain. */
static int read_chain(sbl_session_t *s, const bson_t *e, bson_t ***chainp, size_t *np,
                      sbl_err_t *err)
{
    bson_iter_t it, o;
    *chainp = NULL;
    *np = 0;
    if (!bson_iter_init_find(&it, e, "o") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &o) || !bson_iter_find(&o, "count"))
        return 0;
    for (uint64_t ts = prev_ts_of(e); ts != 0;) {
        bson_t doc;
        bool found = false;
        SBL_RET(sbl_repl_oplog_get(s, ts, &doc, &found, err));
        if (!found)
            return sbl_err_set(err, SBL_E_InternalError, "a large transaction's entry "
                               "%u:%u is missing from the oplog", (unsigned)SBL_TS_SECS(ts),
                               (unsigned)SBL_TS_INC(ts));
        bson_t **l = realloc(*chainp, (*np + 1) * sizeof(*l));
        if (l == NULL) {
            bson_destroy(&doc);
            return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
        }
        *chainp = l;
        l[(*np)++] = bson_copy(&doc);
        bson_destroy(&doc);
        ts = is_partial(l[*np - 1]) ? prev_ts_of(l[*np - 1]) : 0;
    }
    return 0;
}

/* Apply a transaction's operations in one WiredTiger transaction, with the
 * entry written once (by the first write's observer) in the same one.  A
 * large transaction's partial entries were written alone as they came;
 * its last entry applies their operations and its own together. */
static int apply_txn_entry(const bson_t *e, bson_iter_t *ops, sbl_err_t *err)
{
    sbl_session_t *s = sbl_session_get();
    bson_t **chain = NULL;
    size_t nchain = 0;
    int rc;
    if (is_partial(e))
        return sbl_repl_replaying ? 0 : sbl_repl_append_alone_raw(s, e, err);
    if ((rc = read_chain(s, e, &chain, &nchain, err)) != 0)
        goto done;
    sbl_repl_applying = e;
    sbl_repl_applied_written = false;
    if ((rc = sbl_txn_begin_outer(s, err)) != 0) {
        sbl_repl_applying = NULL;
        goto done;
    }
    for (size_t i = nchain; i-- > 0;) {
        bson_iter_t pops;
        if (sbl_rs_apply_ops_of(chain[i], &pops))
            run_ops(&pops, chain[i]);
    }
    run_ops(ops, e);
    if (!sbl_repl_applied_written && !sbl_repl_replaying)
        rc = sbl_oplog_append_raw(s, e, err);
    if (rc == 0)
        rc = sbl_txn_commit_outer(s, err);
    else
        sbl_txn_abort_outer(s);
    sbl_repl_applying = NULL;
done:
    for (size_t i = 0; i < nchain; i++)
        bson_destroy(chain[i]);
    free(chain);
    return rc;
}

/* A failure that says the change was not made and may be next time (a write
 * conflict with a client's transaction, a full disk, an interruption), as
 * opposed to one a replayed entry meets (a duplicate key, a collection that
 * already exists): the entry must not be written without its change.  The
 * code is the reply's, or its first write error's (ok: 1 with writeErrors). */
static int transient_failure(const bson_t *reply)
{
    bson_iter_t it, we;
    int code = 0;
    if (bson_iter_init_find(&it, reply, "ok") && bson_iter_as_double(&it) != 1.0) {
        if (bson_iter_init_find(&it, reply, "code"))
            code = (int)bson_iter_as_int64(&it);
    } else if (bson_iter_init_find(&it, reply, "writeErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
               bson_iter_recurse(&it, &we) && bson_iter_find_descendant(&we, "0.code", &it)) {
        code = (int)bson_iter_as_int64(&it);
    }
    switch (code) {
    case SBL_E_WriteConflict:
    case SBL_E_OutOfDiskSpace:
    case SBL_E_IllegalOperation: /* a read-only filesystem */
    case SBL_E_Interrupted:
    case SBL_E_InterruptedDueToReplStateChange:
    case SBL_E_MaxTimeMSExpired:
        return code;
    default:
        return 0;
    }
}

/* Whether the command's reply says it failed: not ok, or a write error. */
static bool reply_failed(const bson_t *reply)
{
    bson_iter_t it;
    return (bson_iter_init_find(&it, reply, "ok") && bson_iter_as_double(&it) != 1.0) ||
           bson_iter_init_find(&it, reply, "writeErrors");
}

/* Apply entry e; ahead: on a writer ahead of its turn (repl_apply.c), where
 * any failure is left to the entry's turn, when every earlier entry has
 * committed and the serial rules below apply. */
static int apply_one(const bson_t *e, bool ahead, sbl_err_t *err)
{
    char db[128];
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    bson_iter_t ops;
    bson_t po;
    int kind = sbl_repl_prepared_kind(e, &po);
    if (kind != SBL_PREP_NONE) {
        bson_destroy(&cmd);
        bson_destroy(&reply);
        return sbl_repl_apply_prepared(e, kind, &po, err);
    }
    if (sbl_rs_apply_ops_of(e, &ops)) {
        bson_destroy(&cmd);
        bson_destroy(&reply);
        return apply_txn_entry(e, &ops, err);
    }
    sbl_repl_applying = e;
    sbl_repl_applied_written = false;
    int rc = 0;
    if (entry_command(e, db, sizeof(db), &cmd) && sbl_rs_runner != NULL) {
        run_entry(db, &cmd, e, &reply);
        bson_iter_t it;
        int code = transient_failure(&reply);
        if (ahead && (code != 0 || reply_failed(&reply))) {
            rc = sbl_err_set(err, SBL_E_WriteConflict, "applying the entry ahead of its turn "
                             "failed: again at its turn");
        } else if (code != 0) {
            char *json = bson_as_relaxed_extended_json(&reply, NULL);
            rc = sbl_err_set(err, code, "applying the entry failed: %s", json);
            bson_free(json);
        } else if (bson_iter_init_find(&it, &reply, "ok") && bson_iter_as_double(&it) != 1.0) {
            bson_t attr = BSON_INITIALIZER;
            BSON_APPEND_DOCUMENT(&attr, "entry", e);
            BSON_APPEND_DOCUMENT(&attr, "reply", &reply);
            sbl_log(SBL_LOG_DEBUG, "REPL", 7360201, "Applying an entry failed (a replayed "
                    "entry, or a catalog change already made)", &attr);
            bson_destroy(&attr);
        }
        bson_destroy(&reply);
    }
    bson_destroy(&cmd);
    if (rc == 0 && !sbl_repl_applied_written &&
        !sbl_repl_replaying) /* a no-op, or replayed: the entry alone */
        rc = sbl_repl_append_alone_raw(sbl_session_get(), e, err);
    sbl_repl_applying = NULL;
    return rc;
}

int sbl_rs_apply_entry(const bson_t *e, sbl_err_t *err)
{
    return apply_one(e, false, err);
}

int sbl_rs_apply_entry_ahead(const bson_t *e, sbl_err_t *err)
{
    return apply_one(e, true, err);
}

/* ---- the fetcher --------------------------------------------------------------- */

static int member_index_locked(const char *host)
{
    for (int i = 0; rs.config != NULL && i < rs.cfg.n; i++)
        if (strcmp(rs.cfg.m[i].host, host) == 0)
            return i;
    return -1;
}

/* What the sync source rules see of each member (lock held).  A primary
 * tails no one: a winner's answers during its catch-up still name the member
 * it tailed as a secondary, and the hidden member of a failover, which the
 * other secondary had taken as its source when the primary died, saw a
 * cycle through it and took no source until its next heartbeat to it (the
 * first w:"majority" write waited an interval).  In this member's
 * own primary catch-up, a member ahead of it has the entries it waits for,
 * whoever that member tails: no cycle through it counts (as mongod, which
 * breaks a cycle as a primary in catch-up).  Else the member elected by
 * replSetStepUp, seeing the old primary (ahead) tail a member that tailed it,
 * left it and waited out the 30 s catch-up takeover. */
static void candidates_locked(sbl_rs_candidate_t *c)
{
    sbl_optime_t mine = sbl_rs_my_applied();
    for (int i = 0; i < rs.cfg.n; i++) {
        c[i].up = rs.peer[i].up;
        c[i].state = rs.peer[i].state;
        c[i].applied = rs.peer[i].applied;
        c[i].ping_ms = rs.peer[i].ping_avg_ms;
        c[i].term = rs.peer[i].term;
        c[i].has_source = rs.peer[i].sync_source[0] != '\0' && c[i].state != SBL_RS_PRIMARY &&
                          !(rs.catching_up && sbl_optime_cmp(c[i].applied, mine) > 0);
        c[i].source = c[i].has_source ? member_index_locked(rs.peer[i].sync_source) : -1;
    }
}

/* The member to tail (lock held), as mongod chooses: replSetSyncFrom's, else
 * the nearest eligible member by heartbeat ping (sbl_rs_pick_sync_source:
 * the primary unless another is clearly nearer); a member in STARTUP2 (it
 * has just received the config and holds nothing yet) takes the primary or
 * any member that is PRIMARY or SECONDARY, as an initial sync would. */
static int choose_source_locked(void)
{
    int st = atomic_load(&rs.state), src = -1;
    if (rs.config == NULL || rs.self < 0 || rs.sync_halted || !sbl_rs_syncing_state_locked(st))
        return -1;
    if (st == SBL_RS_RECOVERING)
        st = SBL_RS_SECONDARY; /* maintenance: it syncs as a secondary */
    src = sbl_rs_requested_source_locked(); /* replSetSyncFrom */
    if (src < 0 && rs.primary >= 0 && rs.primary != rs.self) {
        if (st == SBL_RS_STARTUP2) {
            src = rs.primary;
        } else {
            sbl_rs_candidate_t c[SBL_RS_MAX_MEMBERS];
            sbl_rs_sync_params_t sp;
            candidates_locked(c);
            sbl_rs_sync_params(&sp);
            src = sbl_rs_pick_sync_source(&rs.cfg, c, rs.self, rs.primary, sbl_rs_my_applied(),
                                          &sp);
        }
    }
    for (int i = 0; st == SBL_RS_STARTUP2 && src < 0 && i < rs.cfg.n; i++)
        if (i != rs.self && rs.peer[i].up &&
            (rs.peer[i].state == SBL_RS_SECONDARY || rs.peer[i].state == SBL_RS_PRIMARY))
            src = i;
    /* No primary: catch up from the secondary that is furthest ahead of us
     * (chaining, as mongod may).  Without it a secondary behind a hidden or
     * priority-0 member could never win an election: that member denies its
     * vote to a candidate behind it, and cannot stand itself. */
    if (st == SBL_RS_SECONDARY && src < 0 && rs.primary < 0) {
        sbl_optime_t best = sbl_rs_my_applied();
        sbl_rs_candidate_t c[SBL_RS_MAX_MEMBERS];
        candidates_locked(c);
        for (int i = 0; i < rs.cfg.n; i++)
            if (i != rs.self && rs.peer[i].up && rs.peer[i].state == SBL_RS_SECONDARY &&
                sbl_optime_cmp(rs.peer[i].applied, best) > 0 &&
                !sbl_rs_source_cycle(&rs.cfg, c, rs.self, i)) {
                best = rs.peer[i].applied;
                src = i;
            }
    }
    return src;
}

/* This member's changes of sync source (applier thread, under rs.lock):
 * what maxNumSyncSourceChangesPerHour counts. */
static sbl_rs_source_changes_t source_changes;

/* Whether to stop tailing member cur (lock held), as mongod's
 * shouldChangeSyncSource, asked when everything fetched is applied (and
 * after each empty wait): we stop syncing (not a secondary any more,
 * halted ...) or cur stops serving while no other member can; another
 * member is requested (replSetSyncFrom); in STARTUP2, the choice differs;
 * cur tails us, directly or through others (sbl_rs_source_cycle: left
 * even when no other member can serve, as nothing reaches the cycle); with
 * no primary known (a reconfig, an election), cur is not ahead of us and
 * another is (Sable's rule in choose_source_locked: catch up from the
 * member furthest ahead).  Otherwise sbl_rs_source_change_reason's rules,
 * which leave a source that serves well alone: only one that lags, gets
 * nothing new, is gone, or is far (by ping) while another is near is left,
 * and for ping at most maxNumSyncSourceChangesPerHour times an hour. */
static bool should_change_locked(int cur)
{
    int pick = choose_source_locked(), st = atomic_load(&rs.state);
    if (pick == cur)
        return false;
    if (rs.config == NULL || rs.self < 0 || rs.sync_halted || !sbl_rs_syncing_state_locked(st) ||
        st == SBL_RS_STARTUP2 || sbl_rs_requested_source_locked() >= 0)
        return true;
    /* A config received in a heartbeat starts our view of the members afresh:
     * until cur answers a heartbeat we know nothing new of it (the fetcher's
     * own errors end the sync if it is gone). */
    bool unheard = rs.peer[cur].last_ok_ms == 0;
    bool serves = unheard || (rs.peer[cur].up && (rs.peer[cur].state == SBL_RS_PRIMARY ||
                                                  rs.peer[cur].state == SBL_RS_SECONDARY));
    sbl_rs_candidate_t c[SBL_RS_MAX_MEMBERS];
    candidates_locked(c);
    const char *why = NULL;
    if (!unheard && sbl_rs_source_cycle(&rs.cfg, c, rs.self, cur)) {
        why = SBL_RS_SOURCE_CYCLE_REASON; /* left even with no other choice: it brings nothing */
    } else if (pick < 0) { /* nothing else to choose: keep a source that still serves */
        return !serves;
    } else if (rs.primary < 0) { /* no primary known (a reconfig, an election): keep one ahead */
        return !serves ||
               (!unheard && sbl_optime_cmp(rs.peer[cur].applied, sbl_rs_my_applied()) <= 0);
    } else if (unheard) {
        return false;
    } else {
        sbl_rs_sync_params_t sp;
        sbl_rs_sync_params(&sp);
        why = sbl_rs_source_change_reason(&rs.cfg, c, rs.self, rs.primary, cur,
                                          sbl_rs_my_applied(), &sp, &source_changes, sbl_now_ms());
    }
    if (why != NULL) {
        bson_t attr = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&attr, "syncSource", rs.cfg.m[cur].host);
        BSON_APPEND_UTF8(&attr, "reason", why);
        sbl_log(SBL_LOG_INFO, "REPL", 21829, "Choosing a new sync source", &attr);
        bson_destroy(&attr);
    }
    return why != NULL;
}

static bool still_syncing_from(const char *host)
{
    pthread_mutex_lock(&rs.lock);
    int cur = member_index_locked(host);
    bool ok = !rs.stopping && cur >= 0 && cur != rs.self && !should_change_locked(cur);
    pthread_mutex_unlock(&rs.lock);
    return ok;
}

/* Whether the applier may go on with the next entry: still a secondary (or
 * in STARTUP2) in the term it started syncing in.  A member elected meanwhile,
 * even for a moment, writes entries of its own: the applier must stop and start
 * again from its newest committed entry, whose check finds the divergence. */
static bool same_term_secondary(int64_t term)
{
    pthread_mutex_lock(&rs.lock);
    bool ok = rs.term == term && sbl_rs_syncing_state_locked(atomic_load(&rs.state));
    pthread_mutex_unlock(&rs.lock);
    return ok;
}

static bool still_in_term(void *term)
{
    return same_term_secondary(*(const int64_t *)term);
}

/* This member's secondaryDelaySecs in ms (0 in STARTUP2: a new member
 * catches up first). */
static int64_t delay_ms(void)
{
    pthread_mutex_lock(&rs.lock);
    int64_t ms = rs.self >= 0 && atomic_load(&rs.state) != SBL_RS_STARTUP2
                     ? rs.cfg.m[rs.self].delay_s * 1000 : 0;
    pthread_mutex_unlock(&rs.lock);
    return ms;
}

/* secondaryDelaySecs: hold entry e until it is that old (by its wall time,
 * else its ts), as mongod's delayed members; false when the applier must
 * stop meanwhile (its source or state changed). */
static bool wait_delay(const bson_t *e, const char *host, int64_t term)
{
    bson_iter_t it;
    int64_t at_ms = -1;
    for (;;) {
        int64_t delay = delay_ms();
        if (delay <= 0)
            return true;
        if (at_ms < 0 && bson_iter_init_find(&it, e, "wall") && BSON_ITER_HOLDS_DATE_TIME(&it))
            at_ms = bson_iter_date_time(&it);
        if (at_ms < 0) {
            uint32_t secs = 0, inc = 0;
            if (bson_iter_init_find(&it, e, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it))
                bson_iter_timestamp(&it, &secs, &inc);
            at_ms = (int64_t)secs * 1000;
        }
        int64_t left = at_ms + delay - sbl_now_ms();
        if (left <= 0)
            return true;
        if (!still_syncing_from(host) || !same_term_secondary(term))
            return false;
        usleep((useconds_t)(left < 200 ? left : 200) * 1000);
    }
}

/* STARTUP2 -> SECONDARY once caught up with the first source. */
static void initial_sync_done(void)
{
    pthread_mutex_lock(&rs.lock);
    if (atomic_load(&rs.state) == SBL_RS_STARTUP2) {
        atomic_store(&rs.state, SBL_RS_SECONDARY);
        atomic_fetch_add(&rs.topology, 1);
        sbl_rs_reset_election_timer_locked(sbl_now_ms());
        sbl_rs_broadcast_locked();
        bson_t attr = BSON_INITIALIZER;
        sbl_log(SBL_LOG_INFO, "REPL", 21392, "Caught up with the sync source: STARTUP2 -> "
                "SECONDARY", &attr);
        bson_destroy(&attr);
    }
    pthread_mutex_unlock(&rs.lock);
}

/* An entry could not be applied: nothing after it committed; the applier
 * stops and starts again from our newest entry. */
static void apply_failed(const sbl_err_t *err)
{
    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&attr, "error", err->msg);
    sbl_log(SBL_LOG_ERROR, "REPL", 21238, "Could not apply an oplog entry", &attr);
    bson_destroy(&attr);
    if (abort_txns != NULL)
        abort_txns(false); /* one busy at the start may hold the conflicting write */
}

static void log_host(int level, int id, const char *msg, const char *host)
{
    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&attr, "syncSource", host);
    sbl_log(level, "REPL", id, msg, &attr);
    bson_destroy(&attr);
}

/* Tail host's oplog while it stays our sync source. */
/* True when the source's newest oplog entry is of a term above last's while
 * its ts is below last's (so our last entry cannot be in its oplog). */
static bool source_newer_term(mongoc_collection_t *oplog, sbl_optime_t last)
{
    bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, sort;
    const bson_t *doc;
    bool newer = false;
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, "$natural", -1);
    bson_append_document_end(&opts, &sort);
    BSON_APPEND_INT64(&opts, "limit", 1);
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(oplog, &filter, &opts, NULL);
    sbl_rs_count_reader();
    if (mongoc_cursor_next(cur, &doc)) {
        bson_iter_t it;
        uint32_t t = 0, i = 0;
        int64_t term = -1;
        if (sbl_doc_find_top(doc, "ts", &it) && BSON_ITER_HOLDS_TIMESTAMP(&it))
            bson_iter_timestamp(&it, &t, &i);
        if (sbl_doc_find_top(doc, "t", &it) && BSON_ITER_HOLDS_NUMBER(&it))
            term = bson_iter_as_int64(&it);
        newer = term > last.t && SBL_TS(t, i) < last.ts;
    }
    mongoc_cursor_destroy(cur);
    bson_destroy(&filter);
    bson_destroy(&opts);
    return newer;
}

/* Commit the applier's open group, if any, and tell the reporter;
 * caught_up: nothing fetched is left to apply (the flush runs here). */
static int end_group(sbl_rs_reporter_t *reporter, bool caught_up, sbl_err_t *err)
{
    if (!sbl_rs_group_open())
        return 0;
    int rc = sbl_rs_group_commit(err);
    if (caught_up)
        sbl_rs_reporter_caught_up(reporter);
    else
        sbl_rs_reporter_applied(reporter);
    return rc;
}

/* oplogBatchDelayMillis: the batch the applier began at from_us may take
 * entries until that long after it began (mongod's batcher, which ends a
 * batch at the delay's end however many entries came; its cap is the
 * batcher's 1 s wait for data).  Whether entries came meanwhile (the batch
 * goes on); false at once with no delay, past the delay, or on a delayed
 * member (secondaryDelaySecs sets its own pace). */
static bool batch_delay_wait(sbl_rs_fetcher_t *f, int64_t from_us)
{
    int64_t d = sbl_rs_batch_delay_ms();
    if (d <= 0 || delay_ms() > 0)
        return false;
    int64_t until = from_us + (d < 1000 ? d : 1000) * 1000;
    return sbl_now_us() < until && sbl_rs_fetcher_wait_more(f, until);
}

/* Entries applied without the queue running dry before the applier looks
 * at its sync source (and its own state: shutdown, a step-up) again. */
#define RELOOK_ENTRIES 1000

static void sync_from(const char *host)
{
    char uri[4096];
    if (!sbl_rs_member_uri(uri, sizeof(uri), host, "directConnection=true&connectTimeoutMS=2000"
                           "&socketTimeoutMS=10000&serverSelectionTimeoutMS=2000&appname=sable-sync"))
        return;
    mongoc_client_t *c = mongoc_client_new(uri);
    if (c == NULL)
        return;
    mongoc_collection_t *oplog = mongoc_client_get_collection(c, "local", "oplog.rs");
    sbl_rs_reporter_t *reporter = sbl_rs_reporter_start(host);
    /* Where we are: the newest entry the oplog holds, not the last ts handed
     * out (a write that took a ts and aborted, in the new term when a step-down
     * raced it, would hide a diverged tail from the check below). */
    sbl_optime_t last = sbl_rs_my_applied();
    sbl_err_t lerr;
    sbl_err_clear(&lerr);
    sbl_session_t *ls = sbl_session_get();
    if (ls != NULL)
        sbl_oplog_last_committed(ls, &last.ts, &last.t, &lerr);
    /* The fetcher tails the source on its own connection (c is the
     * applier's: rollback, the newer-term check) while we apply. */
    sbl_rs_fetcher_t *fetcher = sbl_rs_fetcher_start(host, last.ts);
    const bson_t *doc = NULL; /* the entry being applied (ours to free) */
    /* doc's top-level fields, indexed once: its ts, t, wall, the oplog's
     * key and session fields are looked up about eight times while it is
     * applied (sbl_doc_find_top), each a walk past its document o before. */
    sbl_doc_index_t ix;
    const sbl_doc_index_t *prev_ix = sbl_doc_index_use(NULL);
    bool ended = fetcher == NULL;
    bool first = true;
    uint64_t applied_ts = last.ts; /* the newest entry we hold (committed) */
    pthread_mutex_lock(&rs.lock);
    snprintf(rs.sync_source, sizeof(rs.sync_source), "%s", host);
    int64_t sync_term = rs.term;
    pthread_mutex_unlock(&rs.lock);
    log_host(SBL_LOG_INFO, 21799, "Sync source candidate chosen", host);
    sbl_rs_apply_stream(still_in_term, &sync_term, sbl_rs_reporter_applied, reporter);
    if (abort_txns != NULL)
        abort_txns(false); /* none may commit here now; their writes would block ours */
    int64_t batch_us = 0; /* when the entries being applied started coming (0: none) */
    int64_t batch_from_us = 0; /* when the applier began the batch (oplogBatchDelayMillis) */
    while (!ended && still_syncing_from(host)) {
        int n = 0, looked = 0;
        for (;;) {
            sbl_err_t err;
            sbl_err_clear(&err);
            if (doc != NULL) {
                sbl_doc_index_use(NULL); /* its bytes go: a later entry may take its address */
                sbl_repl_head.doc = NULL;
                sbl_rs_fetched_free(doc);
            }
            doc = NULL;
            /* All fetched is applied (or a long stretch of it, while the
             * fetcher keeps up with us): commit, look again.  With
             * oplogBatchDelayMillis (mongod's, default 0), a batch under way
             * first waits until that long after the applier began it for
             * more entries (fewer, larger batches: one journal flush and
             * one report for many entries, at the cost of that much lag). */
            bool dry = !sbl_rs_fetcher_queued(fetcher);
            if (dry && batch_us != 0 && n - looked < RELOOK_ENTRIES)
                dry = !batch_delay_wait(fetcher, batch_from_us);
            if (dry || n - looked >= RELOOK_ENTRIES) {
                looked = n;
                if (end_group(reporter, dry, &err) != 0) {
                    apply_failed(&err);
                    goto out;
                }
                if (batch_us != 0) { /* a batch applied (metrics.repl.apply.batches) */
                    sbl_rs_count_apply_us(sbl_now_us() - batch_us);
                    sbl_rs_count_batch();
                }
                batch_us = 0;
                batch_from_us = sbl_now_us();
                if (n > 0 && !still_syncing_from(host))
                    goto out;
            }
            int got = sbl_rs_fetcher_next(fetcher, &doc);
            if (got != SBL_FETCH_DOC) {
                ended = got == SBL_FETCH_END;
                break;
            }
            sbl_doc_index_build(&ix, doc);
            sbl_doc_index_use(&ix);
            if (batch_us == 0)
                batch_us = sbl_now_us(); /* entries came: they are applied from now */
            bson_iter_t it;
            uint32_t t = 0, i = 0;
            if (sbl_doc_find_top(doc, "ts", &it) && BSON_ITER_HOLDS_TIMESTAMP(&it))
                bson_iter_timestamp(&it, &t, &i);
            sbl_optime_t o = {.ts = SBL_TS(t, i)};
            if (sbl_doc_find_top(doc, "t", &it) && BSON_ITER_HOLDS_NUMBER(&it))
                o.t = bson_iter_as_int64(&it);
            sbl_repl_head = (sbl_repl_head_t){.doc = doc, .ts = t != 0 ? o.ts : 0, .t = o.t};
            if (sbl_doc_find_top(doc, "wall", &it) && BSON_ITER_HOLDS_DATE_TIME(&it))
                sbl_repl_head.wall = bson_iter_date_time(&it);
            if (first && last.ts != 0) {
                first = false;
                if (o.ts != last.ts || o.t != last.t) {
                    log_host(SBL_LOG_INFO, 21098, "Our last applied entry is not in the sync "
                             "source's oplog: starting rollback", host);
                    if (sbl_rs_rollback(c, host, &err) != 0) {
                        bson_t attr = BSON_INITIALIZER;
                        BSON_APPEND_UTF8(&attr, "error", err.msg);
                        sbl_log(SBL_LOG_ERROR, "REPL", 21606, "Rollback failed: this member "
                                "stops syncing (resync it: empty its dbpath)", &attr);
                        bson_destroy(&attr);
                    }
                    goto out;
                }
                continue;
            }
            first = false;
            if (!same_term_secondary(sync_term))
                goto out;
            if (o.ts <= applied_ts)
                continue;
            bool delayed = delay_ms() > 0;
            if ((delayed || sbl_repl_fp_applies(SBL_REPL_FP_APPLY_STOP, NULL)) &&
                end_group(reporter, false, &err) != 0) {
                apply_failed(&err);
                goto out;
            }
            if (!wait_delay(doc, host, sync_term) ||
                !sbl_repl_fp_wait(SBL_REPL_FP_APPLY_STOP, still_in_term, &sync_term))
                goto out;
            /* With no writers, a document's entry joins the open group; with
             * writers, it goes to its writer; a command waits until everything
             * before it is applied (and committed), then runs alone. */
            bool grouped = !delayed && sbl_rs_group_takes(doc), barrier = false;
            int arc;
            if (grouped) {
                arc = sbl_rs_group_apply(doc, &err);
            } else {
                barrier = sbl_rs_apply_is_barrier(doc);
                if ((arc = end_group(reporter, false, &err)) == 0)
                    arc = barrier ? sbl_rs_apply_drain(&err) : sbl_rs_apply_dispatch(doc, &err);
                if (arc == 0 && barrier)
                    arc = sbl_rs_apply_entry(doc, &err);
            }
            if (arc != 0) {
                apply_failed(&err);
                goto out;
            }
            if (barrier) {
                sbl_rs_count_applied_op(doc);
                sbl_rs_reporter_applied(reporter);
            }
            applied_ts = o.ts;
            n++;
        }
        if (n > 0) {
            sbl_err_t err;
            sbl_err_clear(&err);
            /* the source had nothing more (an IDLE mark), unless the fetch ended */
            if (end_group(reporter, !ended, &err) != 0 ||
                sbl_rs_apply_drain(&err) != 0) { /* caught up: all applied */
                apply_failed(&err);
                goto out;
            }
            if (batch_us != 0) {
                sbl_rs_count_apply_us(sbl_now_us() - batch_us);
                sbl_rs_count_batch();
                batch_us = 0;
            }
        }
        /* Nothing at or after our last entry, yet the source is in a newer term:
         * our tail (written in an older term, with later timestamps than the
         * source's newest entry) diverged, and no write may come to show it. */
        if (first && last.ts != 0 && source_newer_term(oplog, last)) {
            log_host(SBL_LOG_INFO, 21098, "Our last applied entry is not in the sync "
                     "source's oplog: starting rollback", host);
            sbl_err_t err;
            sbl_err_clear(&err);
            if (sbl_rs_rollback(c, host, &err) != 0) {
                bson_t attr = BSON_INITIALIZER;
                BSON_APPEND_UTF8(&attr, "error", err.msg);
                sbl_log(SBL_LOG_ERROR, "REPL", 21606, "Rollback failed: this member "
                        "stops syncing (resync it: empty its dbpath)", &attr);
                bson_destroy(&attr);
            }
            goto out;
        }
        if (ended)
            break;
        if (!first)
            initial_sync_done(); /* the source had nothing more for now */
    }
out:
    sbl_doc_index_use(prev_ix);
    sbl_repl_head.doc = NULL;
    sbl_rs_fetched_free(doc);
    sbl_rs_fetcher_stop(fetcher);
    sbl_err_clear(&lerr);
    if (end_group(reporter, false, &lerr) != 0 || sbl_rs_apply_drain(&lerr) != 0)
        apply_failed(&lerr);
    sbl_rs_apply_stream(NULL, NULL, NULL, NULL);
    sbl_rs_reporter_stop(reporter);
    sbl_rs_report_position(host);
    mongoc_collection_destroy(oplog);
    mongoc_client_destroy(c);
    pthread_mutex_lock(&rs.lock);
    rs.sync_source[0] = '\0';
    pthread_mutex_unlock(&rs.lock);
}

/* Whether an entry this member wrote is still in flight (lock held): a
 * write of the term it led, past the primary check, that has not committed
 * or failed yet (a step-down makes it fail at its commit; a fail point may
 * hold it).  Entries that committed after its ts are invisible until it
 * ends, so sync_from would take the newest visible entry for where we are,
 * compare that with the source, find it there and never roll the diverged
 * ones back: as mongod, whose step-down ends the writes in progress before
 * the member syncs, the applier starts once none is in flight.  Meanwhile
 * heartbeats say we tail no one, so a member tailing us moves. */
static bool own_write_in_flight_locked(int64_t *since_ms)
{
    uint64_t ts = sbl_oplog_vis_oldest_in_flight();
    if (ts == 0) {
        *since_ms = 0;
        return false;
    }
    int64_t now = sbl_now_ms();
    if (*since_ms == 0) {
        *since_ms = now;
    } else if (*since_ms > 0 && now - *since_ms >= 1000) {
        *since_ms = -1; /* logged once a wait */
        bson_t attr = BSON_INITIALIZER;
        bson_append_timestamp(&attr, "oldestInFlight", -1, SBL_TS_SECS(ts), SBL_TS_INC(ts));
        sbl_log(SBL_LOG_INFO, "REPL", 7360210, "Waiting for this member's own oplog writes in "
                "flight to end before choosing a sync source", &attr);
        bson_destroy(&attr);
    }
    return true;
}

static void *sync_main(void *arg)
{
    sbl_thread_name("OplogApplier");
    (void)arg;
    char last_host[256] = ""; /* the member tailed last ("" none yet) */
    int64_t in_flight_since = 0;
    pthread_mutex_lock(&rs.lock);
    while (!rs.stopping) {
        char host[256] = "";
        int src = choose_source_locked();
        if (src >= 0 && own_write_in_flight_locked(&in_flight_since)) {
            sbl_rs_wait_locked(10);
            continue;
        }
        if (src >= 0) {
            snprintf(host, sizeof(host), "%s", rs.cfg.m[src].host);
            if (last_host[0] != '\0' && strcmp(last_host, host) != 0)
                sbl_rs_source_changes_add(&source_changes, sbl_now_ms());
            snprintf(last_host, sizeof(last_host), "%s", host);
            bool clone = atomic_load(&rs.state) == SBL_RS_STARTUP2;
            pthread_mutex_unlock(&rs.lock);
            if (clone && (sbl_oplog_last_ts() == 0 || sbl_rs_initial_sync_flagged()) &&
                sbl_rs_initial_sync(host) != 0)
                usleep(1000 * 1000); /* then try again, from scratch */
            else
                sync_from(host);
            pthread_mutex_lock(&rs.lock);
        }
        sbl_rs_wait_locked(200);
    }
    pthread_mutex_unlock(&rs.lock);
    return NULL;
}

int sbl_rs_sync_start(void)
{
    if (sbl_rs_apply_pool_start() != 0)
        return -1;
    if (pthread_create(&sync_thread, NULL, sync_main, NULL) != 0) {
        sbl_rs_apply_pool_stop();
        return -1;
    }
    sync_running = true;
    return 0;
}

void sbl_rs_sync_stop(void)
{
    if (sync_running) {
        pthread_join(sync_thread, NULL);
        sbl_rs_apply_pool_stop();
    }
    sync_running = false;
}

/* ---- the primary's side: positions and waiters (the commit point and the
 * stable timestamp: repl_commit.c) ------------------------------------------------ */

int sbl_repl_update_position(const bson_t *cmd, bson_t *r, sbl_err_t *err)
{
    bson_iter_t it, arr;
    if (!sbl_repl_enabled())
        return sbl_err_set(err, SBL_E_NoReplicationEnabled, "not running with --replSet");
    if (!bson_iter_init_find(&it, cmd, "optimes") || !BSON_ITER_HOLDS_ARRAY(&it))
        return sbl_err_set(err, SBL_E_BadValue, "replSetUpdatePosition needs optimes");
    bson_iter_recurse(&it, &arr);
    int64_t now = sbl_now_ms();
    pthread_mutex_lock(&rs.lock);
    while (bson_iter_next(&arr)) {
        bson_t d;
        if (!BSON_ITER_HOLDS_DOCUMENT(&arr) || !sbl_iter_doc(&arr, &d))
            continue;
        bson_iter_t f;
        int id = bson_iter_init_find(&f, &d, "memberId") && BSON_ITER_HOLDS_NUMBER(&f)
                     ? (int)bson_iter_as_int64(&f) : -1;
        for (int i = 0; i < rs.cfg.n; i++) {
            if (rs.cfg.m[i].id != id || i == rs.self)
                continue;
            sbl_optime_t ap = sbl_repl_optime_at(&d, "appliedOpTime");
            if (ap.t > rs.term) /* a newer term exists (a primary steps down) */
                sbl_rs_update_term_locked(ap.t);
            int moved = sbl_optime_cmp(ap, rs.peer[i].applied);
            if (moved > 0)
                rs.peer[i].applied = ap;
            /* a position report is a sign of life, as a heartbeat reply is
             * (mongod's liveness): the primary's "can I see a majority"
             * check must not depend on heartbeats alone, which a loaded
             * host delays past a short election timeout */
            rs.peer[i].last_ok_ms = now;
            if (moved >= 0 && bson_iter_init_find(&f, &d, "appliedWallTime") &&
                BSON_ITER_HOLDS_DATE_TIME(&f)) /* the wall time of the applied optime */
                rs.peer[i].applied_wall = bson_iter_date_time(&f);
            sbl_optime_t dp = sbl_repl_optime_at(&d, "durableOpTime");
            if (sbl_optime_cmp(dp, rs.peer[i].durable) > 0) {
                rs.peer[i].durable = dp;
                if (bson_iter_init_find(&f, &d, "durableWallTime") &&
                    BSON_ITER_HOLDS_DATE_TIME(&f))
                    rs.peer[i].durable_wall = bson_iter_date_time(&f);
            }
        }
    }
    bool primary = atomic_load(&rs.state) == SBL_RS_PRIMARY;
    if (primary) {
        sbl_rs_update_commit_quiet_locked();
        /* here, as mongod moves its committed snapshot with the commit
         * point: a w:N write this report ends is then in majority reads
         * (the heartbeat thread, which also publishes, sleeps through it) */
        sbl_rs_publish_stable_locked();
    }
    sbl_rs_append_commit_locked(r);
    void *done = sbl_rs_waits_take_locked(); /* the writes these positions end */
    pthread_mutex_unlock(&rs.lock);
    sbl_rs_waits_answer(done);
    /* then the others that wait for positions (a thread's w:N wait, a
     * step-down's catch-up), with the lock free, after the writes' replies
     * are on their way; only they: the waiter, heartbeat and sync threads
     * have nothing to do with a report (it answered the waits it ends) */
    if (primary)
        pthread_cond_broadcast(&rs.pos_cond);
    return 0;
}
