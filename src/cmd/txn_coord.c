/*
 * txn_coord.c: the two-phase commit coordinator of a sharded cluster's
 * transaction (MongoDB's design).  A router sends coordinateCommitTransaction
 * {participants: [{shardId, host}], lsid, txnNumber} to the primary of the
 * transaction's first shard, which then:
 *
 *   1. writes {_id: {lsid, txnNumber}, participants} to
 *      config.transaction_coordinators (w: majority);
 *   2. sends prepareTransaction to every participant (itself too); each
 *      prepares at a fresh timestamp of its own and answers with it;
 *   3. decides: commit at commitTimestamp = the largest prepareTimestamp
 *      when all voted yes, else abort; the decision goes into the document
 *      (w: majority) before anyone hears it;
 *   4. sends commitTransaction {commitTimestamp} (retried until each
 *      participant has it, within a bound) or abortTransaction to all;
 *   5. deletes the document and answers the router: ok, or
 *      NoSuchTransaction with TransientTransactionError when it aborted.
 *
 * A repeated coordinateCommitTransaction (the router retries after a
 * network error) waits for the first one and gets its outcome, kept in
 * memory for the last RECENT transactions.
 *
 * Recovery: a thread of the shard looks at the documents when the member
 * becomes primary (or starts as one) and, within a second, after a
 * coordination left its document behind (a participant that did not take
 * the decision); it resumes each whose coordination does not run in this
 * process: it sends the decision again (no decision yet: abort) and
 * deletes the document.
 *
 * What must stay true: no participant hears commit before the decision is
 * majority-written; a participant that did not vote yes makes the decision
 * abort.  A participant keeps a prepared transaction through a restart or
 * a failover (its prepare entry: src/repl/repl_prepare.c).
 */
#include "cmd/cmd_int.h"
#include "cmd/migrate_int.h"
#include "common/log.h"
#include "repl/repl.h"
#include "sessions/sessions.h"
#include "shard/shard.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define MAX_PARTS 64
#define RECENT 256
#define PREPARE_TIMEOUT_MS 10000
#define DECISION_TIMEOUT_MS 10000
#define DECISION_TRIES 20

typedef struct part {
    char id[128];
    char host[512];
} part_t;

/* One coordinated transaction: running, or its outcome. */
typedef struct recent {
    uint8_t lsid[16 + 32]; /* id, uid */
    int64_t txn;
    bool used, running;
    int code;          /* 0: committed; else the abort's reason */
    char errmsg[SBL_ERRMSG_MAX];
} recent_t;

static atomic_bool stopping;
static atomic_bool rescan; /* a document was left behind: recovery looks again */
static pthread_mutex_t coord_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t coord_cv = PTHREAD_COND_INITIALIZER;
static recent_t recent[RECENT];
static unsigned recent_next;

static recent_t *recent_find(const uint8_t lsid[48], int64_t txn)
{
    for (int i = 0; i < RECENT; i++)
        if (recent[i].used && recent[i].txn == txn && memcmp(recent[i].lsid, lsid, 48) == 0)
            return &recent[i];
    return NULL;
}

/* A slot for a coordination that starts now (coord_mu held). */
static recent_t *recent_claim_locked(const uint8_t lsid[48], int64_t txn)
{
    recent_t *r = &recent[recent_next++ % RECENT];
    while (r->running) /* a slot of a running one stays (fewer than RECENT run at once) */
        r = &recent[recent_next++ % RECENT];
    memset(r, 0, sizeof(*r));
    memcpy(r->lsid, lsid, 48);
    r->txn = txn;
    r->used = r->running = true;
    return r;
}

/* The coordination of r ended with rc (0: committed; else err says why). */
static void recent_done(recent_t *r, int rc, const sbl_err_t *err)
{
    pthread_mutex_lock(&coord_mu);
    r->running = false;
    r->code = rc;
    if (rc != 0)
        snprintf(r->errmsg, sizeof(r->errmsg), "Transaction %lld was aborted on commit :: "
                 "caused by :: %.400s", (long long)r->txn, err->msg);
    pthread_cond_broadcast(&coord_cv);
    pthread_mutex_unlock(&coord_mu);
}

/* {lsid: {id, uid}, txnNumber} as the coordinator document's _id and the
 * participants' commands carry them. */
static void append_session(bson_t *out, const char *key, const uint8_t lsid[48], int64_t txn)
{
    bson_t l;
    if (key != NULL) {
        bson_t id;
        BSON_APPEND_DOCUMENT_BEGIN(out, key, &id);
        BSON_APPEND_DOCUMENT_BEGIN(&id, "lsid", &l);
        BSON_APPEND_BINARY(&l, "id", BSON_SUBTYPE_UUID, lsid, 16);
        BSON_APPEND_BINARY(&l, "uid", BSON_SUBTYPE_BINARY, lsid + 16, 32);
        bson_append_document_end(&id, &l);
        BSON_APPEND_INT64(&id, "txnNumber", txn);
        bson_append_document_end(out, &id);
        return;
    }
    BSON_APPEND_DOCUMENT_BEGIN(out, "lsid", &l);
    BSON_APPEND_BINARY(&l, "id", BSON_SUBTYPE_UUID, lsid, 16);
    BSON_APPEND_BINARY(&l, "uid", BSON_SUBTYPE_BINARY, lsid + 16, 32);
    bson_append_document_end(out, &l);
    BSON_APPEND_INT64(out, "txnNumber", txn);
    BSON_APPEND_BOOL(out, "autocommit", false);
}

/* The reply's writeConcernError as the error, or 0 (sbl_cmd_run_checked
 * takes ok: 0 and write errors). */
static int wc_error(const bson_t *reply, sbl_err_t *err)
{
    bson_iter_t it, f;
    if (!bson_iter_init_find(&it, reply, "writeConcernError") || !bson_iter_recurse(&it, &f))
        return 0;
    int code = SBL_E_OperationFailed;
    const char *msg = "failed";
    while (bson_iter_next(&f))
        if (strcmp(bson_iter_key(&f), "code") == 0)
            code = (int)bson_iter_as_int64(&f);
        else if (strcmp(bson_iter_key(&f), "errmsg") == 0 && BSON_ITER_HOLDS_UTF8(&f))
            msg = bson_iter_utf8(&f, NULL);
    return sbl_err_set(err, code, "config.transaction_coordinators: %s", msg);
}

/* Insert (first), replace or delete (doc NULL) the coordinator document,
 * w: majority.  A first insert finding one there fails with DuplicateKey. */
static int coord_doc_write(const uint8_t lsid[48], int64_t txn, const bson_t *doc, bool first,
                           sbl_err_t *err)
{
    bson_t c = BSON_INITIALIZER, arr, st, q, wc, reply;
    bool del = doc == NULL;
    BSON_APPEND_UTF8(&c, first ? "insert" : del ? "delete" : "update", "transaction_coordinators");
    BSON_APPEND_ARRAY_BEGIN(&c, first ? "documents" : del ? "deletes" : "updates", &arr);
    if (first) {
        BSON_APPEND_DOCUMENT(&arr, "0", doc);
    } else {
        BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &st);
        BSON_APPEND_DOCUMENT_BEGIN(&st, "q", &q);
        append_session(&q, "_id", lsid, txn);
        bson_append_document_end(&st, &q);
        if (del)
            BSON_APPEND_INT32(&st, "limit", 1);
        else
            BSON_APPEND_DOCUMENT(&st, "u", doc);
        bson_append_document_end(&arr, &st);
    }
    bson_append_array_end(&c, &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&c, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    BSON_APPEND_INT32(&wc, "wtimeout", DECISION_TIMEOUT_MS);
    bson_append_document_end(&c, &wc);
    int rc = sbl_cmd_run_checked("config", &c, &reply, err);
    if (rc == 0)
        rc = wc_error(&reply, err);
    bson_destroy(&reply);
    bson_destroy(&c);
    return rc;
}

static int coord_doc(const uint8_t lsid[48], int64_t txn, const bson_t *doc, sbl_err_t *err)
{
    return coord_doc_write(lsid, txn, doc, false, err);
}

/* The coordinator document of (lsid, txn) into *out (initialised when found). */
static bool coord_doc_find(const uint8_t lsid[48], int64_t txn, bson_t *out)
{
    bson_t c = BSON_INITIALIZER, f, reply = BSON_INITIALIZER;
    bson_iter_t it;
    BSON_APPEND_UTF8(&c, "find", "transaction_coordinators");
    BSON_APPEND_DOCUMENT_BEGIN(&c, "filter", &f);
    append_session(&f, "_id", lsid, txn);
    bson_append_document_end(&c, &f);
    sbl_cmd_run("config", &c, &reply);
    bool found = bson_iter_init(&it, &reply) &&
                 bson_iter_find_descendant(&it, "cursor.firstBatch.0", &it) &&
                 BSON_ITER_HOLDS_DOCUMENT(&it);
    if (found) {
        bson_t d;
        sbl_iter_doc(&it, &d);
        bson_copy_to(&d, out);
    }
    bson_destroy(&reply);
    bson_destroy(&c);
    return found;
}

/* The coordinator document: _id, participants and, once decided, decision. */
static void build_doc(bson_t *d, const uint8_t lsid[48], int64_t txn, const part_t *p, int n,
                      const char *decision, uint64_t commit_ts)
{
    bson_t arr, el, dd;
    append_session(d, "_id", lsid, txn);
    BSON_APPEND_ARRAY_BEGIN(d, "participants", &arr);
    for (int i = 0; i < n; i++) {
        char k[16];
        snprintf(k, sizeof(k), "%d", i);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, k, &el);
        BSON_APPEND_UTF8(&el, "shardId", p[i].id);
        BSON_APPEND_UTF8(&el, "host", p[i].host);
        bson_append_document_end(&arr, &el);
    }
    bson_append_array_end(d, &arr);
    if (decision != NULL) {
        BSON_APPEND_DOCUMENT_BEGIN(d, "decision", &dd);
        BSON_APPEND_UTF8(&dd, "decision", decision);
        if (commit_ts != 0)
            bson_append_timestamp(&dd, "commitTimestamp", -1, (uint32_t)(commit_ts >> 32),
                                  (uint32_t)commit_ts);
        bson_append_document_end(d, &dd);
    }
}

/* Send {verb: 1, lsid, txnNumber, autocommit: false, [commitTimestamp]} to p. */
static int to_participant(const part_t *p, const char *verb, const uint8_t lsid[48],
                          int64_t txn, uint64_t commit_ts, int timeout_ms, bson_t *reply,
                          sbl_err_t *err)
{
    bson_t c = BSON_INITIALIZER, wc;
    BSON_APPEND_INT32(&c, verb, 1);
    append_session(&c, NULL, lsid, txn);
    if (commit_ts != 0)
        bson_append_timestamp(&c, "commitTimestamp", -1, (uint32_t)(commit_ts >> 32),
                              (uint32_t)commit_ts);
    BSON_APPEND_DOCUMENT_BEGIN(&c, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(&c, &wc);
    int rc = sbl_shard_remote_check_within(p->host, "admin", &c, timeout_ms, reply, err);
    bson_destroy(&c);
    return rc;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Tests' fail points (mongod's names): hold a coordination after every
 * participant voted, before the decision is written; or after the decision
 * is written (majority-acknowledged here), before any participant hears it. */
enum { FP_BEFORE_DECISION, FP_AFTER_DECISION, FP_N };
static const char *const fp_names[FP_N] = {"hangBeforeWritingDecision",
                                           "hangBeforeWaitingForDecisionWriteConcern"};
static atomic_bool fp_on[FP_N];

int sbl_cmd_coord_fail_point(const char *name, bool on)
{
    for (int i = 0; i < FP_N; i++)
        if (strcmp(name, fp_names[i]) == 0) {
            atomic_store(&fp_on[i], on);
            return 0;
        }
    return -1;
}

static void fp_hold(int fp)
{
    if (!atomic_load(&fp_on[fp]))
        return;
    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&attr, "failPoint", fp_names[fp]);
    sbl_log(SBL_LOG_INFO, "TXN", 7360301, "Coordinator held by a fail point", &attr);
    bson_destroy(&attr);
    while (atomic_load(&fp_on[fp]) && !atomic_load(&stopping))
        sleep_ms(20);
}

/* Every participant hears the decision (commit is retried until each has
 * it, within a bound); then the coordinator's document goes.  A document
 * left because a participant did not answer is resumed by recovery. */
static void deliver(const uint8_t lsid[48], int64_t txn, const part_t *p, int n, bool commit,
                    uint64_t commit_ts)
{
    bool all = true;
    for (int i = 0; i < n; i++) {
        for (int tries = 0;; tries++) {
            bson_t r;
            sbl_err_t e = {0};
            int prc = to_participant(&p[i], commit ? "commitTransaction" : "abortTransaction",
                                     lsid, txn, commit ? commit_ts : 0, DECISION_TIMEOUT_MS,
                                     &r, &e);
            bson_destroy(&r);
            if (prc == 0 || !commit || e.code == SBL_E_NoSuchTransaction)
                break; /* an abort needs no answer: an unprepared participant aborts anyway */
            if (tries + 1 >= DECISION_TRIES || atomic_load(&stopping)) {
                all = false;
                break;
            }
            sleep_ms(50 * (tries + 1));
        }
    }
    if (all) {
        sbl_err_t e = {0};
        coord_doc(lsid, txn, NULL, &e);
    } else {
        atomic_store(&rescan, true); /* the recovery thread tries again */
    }
}

static bool resume_doc(const bson_t *d);

/* Run the protocol; returns 0 when committed, else the abort's reason. */
static int coordinate(const uint8_t lsid[48], int64_t txn, const part_t *p, int n,
                      sbl_err_t *err)
{
    bson_t d = BSON_INITIALIZER;
    build_doc(&d, lsid, txn, p, n, NULL, 0);
    int rc = coord_doc_write(lsid, txn, &d, true, err);
    bson_destroy(&d);
    if (rc == SBL_E_DuplicateKey) {
        /* coordinated before (this member restarted, or another was primary):
         * that coordination's decision stands, never a new one */
        bson_t old;
        sbl_err_clear(err);
        if (!coord_doc_find(lsid, txn, &old))
            return sbl_err_set(err, SBL_E_ConflictingOperationInProgress, "the transaction's "
                               "coordination document changed under it: retry");
        bool commit = resume_doc(&old);
        bson_destroy(&old);
        return commit ? 0 : sbl_err_set(err, SBL_E_NoSuchTransaction, "its coordinator "
                                        "restarted before deciding");
    }
    if (rc != 0)
        return rc; /* nobody was asked to prepare: the router aborts everywhere */
    uint64_t commit_ts = 0;
    sbl_err_t vote = {0};
    for (int i = 0; i < n && vote.code == 0; i++) {
        bson_t r;
        bson_iter_t it;
        if (to_participant(&p[i], "prepareTransaction", lsid, txn, 0, PREPARE_TIMEOUT_MS, &r,
                           &vote) == 0) {
            if (bson_iter_init_find(&it, &r, "prepareTimestamp") &&
                BSON_ITER_HOLDS_TIMESTAMP(&it)) {
                uint32_t t, inc;
                bson_iter_timestamp(&it, &t, &inc);
                uint64_t ts = ((uint64_t)t << 32) | inc;
                if (ts > commit_ts)
                    commit_ts = ts;
            } else {
                sbl_err_set(&vote, SBL_E_InternalError, "prepareTransaction on %s gave no "
                            "prepareTimestamp", p[i].id);
            }
        }
        bson_destroy(&r);
    }
    bool commit = vote.code == 0;
    fp_hold(FP_BEFORE_DECISION);
    d = (bson_t)BSON_INITIALIZER;
    build_doc(&d, lsid, txn, p, n, commit ? "commit" : "abort", commit ? commit_ts : 0);
    sbl_err_t derr = {0};
    rc = coord_doc(lsid, txn, &d, &derr);
    bson_destroy(&d);
    if (rc != 0 && commit) {
        /* the decision is not durable: nobody has heard commit, so abort */
        commit = false;
        vote = derr;
    }
    fp_hold(FP_AFTER_DECISION);
    deliver(lsid, txn, p, n, commit, commit_ts);
    if (commit)
        return 0;
    *err = vote;
    return vote.code ? vote.code : sbl_err_set(err, SBL_E_NoSuchTransaction, "aborted");
}

int sbl_cmd_coordinate_commit(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it, el, f;
    uint8_t lsid[48];
    bool has_id = false;
    int64_t txn = -1;
    part_t *p = calloc(MAX_PARTS, sizeof(*p));
    int n = 0;

    if (p == NULL)
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    sbl_lsid_t l;
    sbl_err_t lerr = {0};
    /* the router names the client's uid (as a cluster member may) */
    if (sbl_doc_find_top(ctx->cmd, "lsid", &it) &&
        sbl_lsid_parse(&it, "lsid", ctx->user_uid, true, &l, &lerr) == 0) {
        memcpy(lsid, l.id, 16);
        memcpy(lsid + 16, l.uid, 32);
        has_id = true;
    }
    if (sbl_doc_find_top(ctx->cmd, "txnNumber", &it) && BSON_ITER_HOLDS_NUMBER(&it))
        txn = bson_iter_as_int64(&it);
    int rc = 0;
    if (!has_id || txn < 0) {
        rc = sbl_err_set(err, SBL_E_InvalidOptions, "coordinateCommitTransaction needs a "
                         "session (lsid) and a txnNumber");
        goto done;
    }
    if (!sbl_doc_find_top(ctx->cmd, "participants", &it) || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &el)) {
        rc = sbl_err_set(err, SBL_E_TypeMismatch, "BSON field 'participants' is missing or is "
                         "not an array");
        goto done;
    }
    while (bson_iter_next(&el)) {
        if (n == MAX_PARTS || !BSON_ITER_HOLDS_DOCUMENT(&el) || !bson_iter_recurse(&el, &f)) {
            rc = sbl_err_set(err, SBL_E_BadValue, "participants: at most %d documents "
                             "{shardId, host}", MAX_PARTS);
            goto done;
        }
        while (bson_iter_next(&f))
            if (BSON_ITER_HOLDS_UTF8(&f) && strcmp(bson_iter_key(&f), "shardId") == 0)
                snprintf(p[n].id, sizeof(p[n].id), "%s", bson_iter_utf8(&f, NULL));
            else if (BSON_ITER_HOLDS_UTF8(&f) && strcmp(bson_iter_key(&f), "host") == 0)
                snprintf(p[n].host, sizeof(p[n].host), "%s", bson_iter_utf8(&f, NULL));
        if (p[n].id[0] == '\0' || p[n].host[0] == '\0') {
            rc = sbl_err_set(err, SBL_E_BadValue, "participants[%d] needs shardId and host", n);
            goto done;
        }
        n++;
    }
    if (n == 0) {
        rc = sbl_err_set(err, SBL_E_BadValue, "participants is empty");
        goto done;
    }

    /* one coordination per transaction; a repeat waits for its outcome */
    pthread_mutex_lock(&coord_mu);
    recent_t *r = recent_find(lsid, txn);
    if (r != NULL) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 60;
        while (r->running && pthread_cond_timedwait(&coord_cv, &coord_mu, &until) == 0)
            ;
        if (r->running)
            rc = sbl_err_set(err, SBL_E_ConflictingOperationInProgress, "the transaction's "
                             "coordination is still running");
        else if (r->code != 0)
            rc = sbl_err_set(err, SBL_E_NoSuchTransaction, "%s", r->errmsg);
        pthread_mutex_unlock(&coord_mu);
        goto done;
    }
    r = recent_claim_locked(lsid, txn);
    pthread_mutex_unlock(&coord_mu);
    rc = coordinate(lsid, txn, p, n, err);
    recent_done(r, rc, err);
    if (rc != 0) /* the client sees the abort as mongod reports it */
        rc = sbl_err_set(err, SBL_E_NoSuchTransaction, "%s", r->errmsg);
done:
    free(p);
    if (rc == SBL_E_NoSuchTransaction) {
        bson_t arr;
        BSON_APPEND_ARRAY_BEGIN(ctx->reply, "errorLabels", &arr);
        BSON_APPEND_UTF8(&arr, "0", "TransientTransactionError");
        bson_append_array_end(ctx->reply, &arr);
    }
    return rc;
}

/* ---- recovery ------------------------------------------------------------ */

/* A coordinator document's fields: false when it lacks one (p: MAX_PARTS). */
static bool parse_doc(const bson_t *d, uint8_t lsid[48], int64_t *txnp, part_t *p, int *np,
                      bool *commitp, uint64_t *commit_tsp)
{
    bson_iter_t it, f, el;
    int64_t txn = -1;
    int n = 0;
    bool got = false;
    static const uint8_t no_uid[32];
    sbl_lsid_t l;
    sbl_err_t e = {0};
    if (bson_iter_init(&it, d) && bson_iter_find_descendant(&it, "_id.lsid", &f) &&
        sbl_lsid_parse(&f, "lsid", no_uid, true, &l, &e) == 0) {
        memcpy(lsid, l.id, 16);
        memcpy(lsid + 16, l.uid, 32);
        got = true;
    }
    if (bson_iter_init(&it, d) && bson_iter_find_descendant(&it, "_id.txnNumber", &f) &&
        BSON_ITER_HOLDS_NUMBER(&f))
        txn = bson_iter_as_int64(&f);
    if (bson_iter_init_find(&it, d, "participants") && bson_iter_recurse(&it, &el))
        while (n < MAX_PARTS && bson_iter_next(&el)) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&el) || !bson_iter_recurse(&el, &f))
                continue;
            while (bson_iter_next(&f))
                if (BSON_ITER_HOLDS_UTF8(&f) && strcmp(bson_iter_key(&f), "shardId") == 0)
                    snprintf(p[n].id, sizeof(p[n].id), "%s", bson_iter_utf8(&f, NULL));
                else if (BSON_ITER_HOLDS_UTF8(&f) && strcmp(bson_iter_key(&f), "host") == 0)
                    snprintf(p[n].host, sizeof(p[n].host), "%s", bson_iter_utf8(&f, NULL));
            if (p[n].host[0] != '\0')
                n++;
        }
    bool commit = false;
    uint64_t commit_ts = 0;
    if (bson_iter_init(&it, d) && bson_iter_find_descendant(&it, "decision.decision", &f) &&
        BSON_ITER_HOLDS_UTF8(&f) && strcmp(bson_iter_utf8(&f, NULL), "commit") == 0 &&
        bson_iter_init(&it, d) &&
        bson_iter_find_descendant(&it, "decision.commitTimestamp", &f) &&
        BSON_ITER_HOLDS_TIMESTAMP(&f)) {
        uint32_t t, i;
        bson_iter_timestamp(&f, &t, &i);
        commit_ts = ((uint64_t)t << 32) | i;
        commit = true;
    }
    *txnp = txn;
    *np = n;
    *commitp = commit;
    *commit_tsp = commit_ts;
    return got && txn >= 0 && n > 0;
}

/* Send document d's decision again (no decision: abort, as nobody can have
 * heard commit) and delete it; true when the decision is commit. */
static bool resume_doc(const bson_t *d)
{
    uint8_t lsid[48];
    int64_t txn;
    int n;
    bool commit = false;
    uint64_t commit_ts;
    part_t *p = calloc(MAX_PARTS, sizeof(*p));
    if (p != NULL && parse_doc(d, lsid, &txn, p, &n, &commit, &commit_ts)) {
        bson_t attr = BSON_INITIALIZER;
        BSON_APPEND_INT64(&attr, "txnNumber", txn);
        BSON_APPEND_UTF8(&attr, "decision", commit ? "commit" : "abort");
        sbl_log(SBL_LOG_INFO, "TXN", 22438, "Resuming a two-phase commit's coordination",
                &attr);
        bson_destroy(&attr);
        deliver(lsid, txn, p, n, commit, commit_ts);
    }
    free(p);
    return commit;
}

/* Resume the coordination of document d (one of config.transaction_coordinators)
 * unless it runs here now. */
static void resume_one(const bson_t *d)
{
    uint8_t lsid[48];
    int64_t txn;
    int n;
    bool commit;
    uint64_t commit_ts;
    part_t *p = calloc(MAX_PARTS, sizeof(*p));
    bool ok = p != NULL && parse_doc(d, lsid, &txn, p, &n, &commit, &commit_ts);
    free(p);
    if (!ok)
        return;
    pthread_mutex_lock(&coord_mu);
    recent_t *r = recent_find(lsid, txn);
    if (r != NULL && r->running) { /* this process coordinates it now */
        pthread_mutex_unlock(&coord_mu);
        return;
    }
    r = recent_claim_locked(lsid, txn);
    pthread_mutex_unlock(&coord_mu);
    commit = resume_doc(d);
    sbl_err_t e = {0};
    if (!commit)
        sbl_err_set(&e, SBL_E_NoSuchTransaction, "its coordinator restarted before deciding");
    recent_done(r, commit ? 0 : e.code, &e);
}

/* One pass over config.transaction_coordinators (a shard's primary only):
 * when it has just become primary (or started) and after a coordination
 * left its document behind. */
static void recover_pass(void)
{
    static bool was_primary;
    bool primary = sbl_repl_writable() && sbl_shard_name() != NULL;
    bool now = primary && (!was_primary || atomic_exchange(&rescan, false));
    was_primary = primary;
    if (!now)
        return;
    /* every document, a batch at a time (many coordinations may have been
     * under way when the last primary went) */
    int64_t cursor = 0;
    bool first = true;
    while (first || cursor != 0) {
        bson_t c = BSON_INITIALIZER, reply = BSON_INITIALIZER;
        bson_iter_t b;
        if (first)
            BSON_APPEND_UTF8(&c, "find", "transaction_coordinators");
        else {
            BSON_APPEND_INT64(&c, "getMore", cursor);
            BSON_APPEND_UTF8(&c, "collection", "transaction_coordinators");
        }
        BSON_APPEND_INT32(&c, "batchSize", 100);
        sbl_cmd_run("config", &c, &reply);
        bson_destroy(&c);
        bool had = !first;
        first = false;
        if (!mig_reply_batch(&reply, &cursor, &b)) {
            if (had) /* the cursor went (timed out): another pass later */
                atomic_store(&rescan, true);
            cursor = 0;
        } else
            while (!atomic_load(&stopping) && bson_iter_next(&b)) {
                bson_t d;
                if (sbl_iter_doc(&b, &d))
                    resume_one(&d);
            }
        bson_destroy(&reply);
        if (atomic_load(&stopping)) {
            mig_kill_cursor("config", "transaction_coordinators", cursor);
            break;
        }
    }
}

static pthread_t recover_thread;
static bool recover_running;
static pthread_mutex_t stop_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stop_cv = PTHREAD_COND_INITIALIZER;

static void *recover_main(void *arg)
{
    (void)arg;
    sbl_thread_name("txncoordrecov");
    pthread_mutex_lock(&stop_mu);
    while (!atomic_load(&stopping)) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&stop_cv, &stop_mu, &until);
        if (atomic_load(&stopping))
            break;
        pthread_mutex_unlock(&stop_mu);
        recover_pass();
        pthread_mutex_lock(&stop_mu);
    }
    pthread_mutex_unlock(&stop_mu);
    sbl_session_release_thread();
    return NULL;
}

void sbl_cmd_coord_start(void)
{
    atomic_store(&stopping, false);
    if (!recover_running && pthread_create(&recover_thread, NULL, recover_main, NULL) == 0)
        recover_running = true;
}

void sbl_cmd_coord_stop(void)
{
    if (!recover_running)
        return;
    pthread_mutex_lock(&stop_mu);
    atomic_store(&stopping, true);
    pthread_cond_signal(&stop_cv);
    pthread_mutex_unlock(&stop_mu);
    pthread_join(recover_thread, NULL);
    recover_running = false;
}
