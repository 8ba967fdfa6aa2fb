/*
 * rt_session.c: logical sessions, retryable writes and transactions
 * through the router, as mongos 7.0 forwards them.  The dispatcher calls
 * rt_sess_begin with each client command; it notes the command's lsid,
 * txnNumber and autocommit on the thread, and the transport (rt_remote.c)
 * asks rt_sess_extra for the fields each command to a shard carries:
 *
 * - a retryable write (lsid and txnNumber, no autocommit): lsid (with the
 *   client's uid, which shards accept from a cluster member) and txnNumber;
 *   rt_write.c adds stmtIds, the statements' indexes in the client's batch,
 *   so a retry split differently still names each statement the same way;
 * - a transaction (autocommit: false): lsid, txnNumber, autocommit: false,
 *   and on a shard's first contact startTransaction: true and the
 *   transaction's readConcern.  The router remembers, per session, the
 *   transaction's participants and which of them wrote; commitTransaction
 *   and abortTransaction go to the participants.
 *
 * Commit: no participant, nothing to do; one shard that wrote (and any
 * number that only read): the readers commit first, then the writer, so
 * the writer's commit decides.  Two or more shards that wrote: two-phase
 * commit, coordinated by the first shard the transaction contacted
 * (coordinateCommitTransaction with every participant, retried after a
 * network error: it is idempotent; src/cmd/txn_coord.c on the shard).
 *
 * What must stay true: one transaction's state is changed under tx_lock
 * only; a command failing inside a transaction aborts it on every
 * participant (mongos's implicit abort), so no shard keeps it open.
 */
#include "router/router_int.h"

#include "doc/doc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define RT_SESSION_MINUTES 30 /* logicalSessionTimeoutMinutes */

enum { TX_NONE, TX_ACTIVE, TX_COMMITTED, TX_ABORTED };

typedef struct rt_txn {
    uint8_t id[16], uid[32];
    int64_t txn;          /* the newest transaction's txnNumber */
    int state;
    bool part[RT_MAX_SHARDS], wrote[RT_MAX_SHARDS];
    int first;            /* the first shard it contacted (its coordinator); -1: none */
    bson_t *read_concern; /* its first statement's readConcern, or NULL */
    int64_t used_ms;
    struct rt_txn *next;
} rt_txn_t;

/* The client command this thread runs. */
typedef struct cur_sess {
    bool on, has_lsid, has_txn, in_txn, write;
    bool decided; /* a coordinator has the commit: no implicit abort whatever happens */
    uint8_t id[16], uid[32];
    int64_t txn;
    uint64_t read_at; /* its transaction's readConcern snapshot atClusterTime (0: none) */
} cur_sess_t;

static __thread cur_sess_t cur;
static __thread cur_sess_t outer; /* the client's retryable write, during an internal transaction */
static pthread_mutex_t tx_lock = PTHREAD_MUTEX_INITIALIZER;
#define TX_BUCKETS 1024 /* session records hashed by their lsid's first bytes */
static rt_txn_t *txns[TX_BUCKETS];

static rt_txn_t **bucket_of(const uint8_t id[16])
{
    return &txns[(id[0] | (unsigned)id[1] << 8) % TX_BUCKETS];
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool is_write(const char *name)
{
    static const char *const w[] = {"insert", "update", "delete", "findAndModify",
                                    "findandmodify", "create", "createIndexes", NULL};
    for (int i = 0; w[i]; i++)
        if (strcmp(name, w[i]) == 0)
            return true;
    return false;
}

/* The entry of the current session (tx_lock held); create: make one.
 * Entries of its bucket unused for the session timeout are dropped on the
 * way. */
static rt_txn_t *find_locked(bool create)
{
    int64_t now = wall_ms();
    rt_txn_t *found = NULL;
    rt_txn_t **head = bucket_of(cur.id);
    for (rt_txn_t **pp = head; *pp;) {
        rt_txn_t *t = *pp;
        if (memcmp(t->id, cur.id, 16) == 0 && memcmp(t->uid, cur.uid, 32) == 0) {
            found = t;
        } else if (now - t->used_ms > (int64_t)RT_SESSION_MINUTES * 60000) {
            *pp = t->next;
            if (t->read_concern)
                bson_destroy(t->read_concern);
            free(t);
            continue;
        }
        pp = &t->next;
    }
    if (found == NULL && create && (found = calloc(1, sizeof(*found))) != NULL) {
        memcpy(found->id, cur.id, 16);
        memcpy(found->uid, cur.uid, 32);
        found->txn = -1;
        found->next = *head;
        *head = found;
    }
    if (found != NULL)
        found->used_ms = now;
    return found;
}

/* Drop the record of session (id, uid). */
static void forget(const uint8_t id[16], const uint8_t uid[32])
{
    pthread_mutex_lock(&tx_lock);
    for (rt_txn_t **pp = bucket_of(id); *pp; pp = &(*pp)->next)
        if (memcmp((*pp)->id, id, 16) == 0 && memcmp((*pp)->uid, uid, 32) == 0) {
            rt_txn_t *t = *pp;
            *pp = t->next;
            if (t->read_concern)
                bson_destroy(t->read_concern);
            free(t);
            break;
        }
    pthread_mutex_unlock(&tx_lock);
}

static int no_such(int64_t txn, const char *why, sbl_err_t *err)
{
    return sbl_err_set(err, SBL_E_NoSuchTransaction, "Transaction with { txnNumber: %lld } %s",
                       (long long)txn, why);
}

/* A readConcern's atClusterTime when its level is snapshot (0: none). */
static uint64_t snapshot_at(const bson_t *rc)
{
    bson_iter_t it;
    uint32_t t = 0, i = 0;
    if (rc == NULL || !bson_iter_init_find(&it, rc, "level") || !BSON_ITER_HOLDS_UTF8(&it) ||
        strcmp(bson_iter_utf8(&it, NULL), "snapshot") != 0 ||
        !bson_iter_init_find(&it, rc, "atClusterTime") || !BSON_ITER_HOLDS_TIMESTAMP(&it))
        return 0;
    bson_iter_timestamp(&it, &t, &i);
    return ((uint64_t)t << 32) | i;
}

/* A new transaction (startTransaction) or a statement of the current one. */
static int txn_enter(const char *name, const bson_t *cmd, bool start, sbl_err_t *err)
{
    int rc = 0;
    pthread_mutex_lock(&tx_lock);
    rt_txn_t *t = find_locked(start);
    if (start) {
        if (t == NULL) {
            rc = sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
        } else if (cur.txn < t->txn) {
            rc = sbl_err_set(err, SBL_E_TransactionTooOld, "Cannot start transaction %lld on "
                             "session because a newer transaction %lld has already started",
                             (long long)cur.txn, (long long)t->txn);
        } else if (cur.txn == t->txn && t->state != TX_NONE) {
            rc = sbl_err_set(err, SBL_E_ConflictingOperationInProgress,
                             "Cannot start a transaction with txnNumber %lld: it was already "
                             "used on this session", (long long)cur.txn);
        } else {
            t->txn = cur.txn;
            t->state = TX_ACTIVE;
            memset(t->part, 0, sizeof(t->part));
            memset(t->wrote, 0, sizeof(t->wrote));
            t->first = -1;
            if (t->read_concern)
                bson_destroy(t->read_concern);
            t->read_concern = NULL;
            bson_iter_t it;
            if (bson_iter_init_find(&it, cmd, "readConcern") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
                bson_t rc_doc;
                sbl_iter_doc(&it, &rc_doc);
                t->read_concern = bson_copy(&rc_doc);
            }
        }
    } else if (t == NULL || t->txn != cur.txn) {
        rc = no_such(cur.txn, "does not match any in-progress transactions on this router", err);
    } else if (t->state == TX_ABORTED && strcmp(name, "abortTransaction") != 0) {
        rc = no_such(cur.txn, "has been aborted.", err);
    } else if (t->state == TX_COMMITTED && strcmp(name, "commitTransaction") != 0 &&
               strcmp(name, "abortTransaction") != 0) {
        rc = sbl_err_set(err, SBL_E_TransactionCommitted,
                         "Transaction with { txnNumber: %lld } has been committed.",
                         (long long)cur.txn);
    }
    if (rc == 0 && t != NULL)
        cur.read_at = snapshot_at(t->read_concern);
    pthread_mutex_unlock(&tx_lock);
    return rc;
}

uint64_t rt_sess_read_at(void)
{
    return cur.read_at;
}

int rt_sess_lsid(const bson_iter_t *it, uint8_t id[16], sbl_err_t *err)
{
    bson_iter_t f;
    bool has = false;
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bson_iter_recurse(it, &f))
        return sbl_err_set(err, SBL_E_TypeMismatch, "BSON field 'lsid' is the wrong "
                           "type, expected type 'object'");
    while (bson_iter_next(&f)) {
        bson_subtype_t st;
        uint32_t len = 0;
        const uint8_t *data;
        if (strcmp(bson_iter_key(&f), "id") != 0 || !BSON_ITER_HOLDS_BINARY(&f))
            continue;
        bson_iter_binary(&f, &st, &len, &data);
        if (len != 16)
            return sbl_err_set(err, SBL_E_BadValue, "BSON field 'lsid.id' must be a UUID");
        memcpy(id, data, 16);
        has = true;
    }
    if (!has)
        return sbl_err_set(err, SBL_E_FailedToParse, "BSON field 'lsid.id' is "
                           "missing but a required field");
    return 0;
}

int rt_sess_begin(const char *name, const bson_t *cmd, sbl_err_t *err)
{
    memset(&cur, 0, sizeof(cur));
    bson_iter_t it;
    bool start = false, has_ac = false;
    bson_iter_init(&it, cmd);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "lsid") == 0) {
            SBL_RET(rt_sess_lsid(&it, cur.id, err));
            cur.has_lsid = true;
        } else if (strcmp(k, "txnNumber") == 0) {
            if (!BSON_ITER_HOLDS_INT64(&it) && !BSON_ITER_HOLDS_INT32(&it))
                return sbl_err_set(err, SBL_E_TypeMismatch, "BSON field 'txnNumber' is the "
                                   "wrong type, expected type 'long'");
            cur.txn = bson_iter_as_int64(&it);
            cur.has_txn = true;
        } else if (strcmp(k, "autocommit") == 0) {
            has_ac = true;
            cur.in_txn = !bson_iter_as_bool(&it);
            if (!cur.in_txn)
                return sbl_err_set(err, SBL_E_InvalidOptions, "autocommit: true is not "
                                   "supported");
        } else if (strcmp(k, "startTransaction") == 0) {
            start = bson_iter_as_bool(&it);
        }
    }
    if (cur.has_txn && !cur.has_lsid)
        return sbl_err_set(err, SBL_E_InvalidOptions, "Transaction number requires a session "
                           "ID to also be specified");
    if ((has_ac || start) && !cur.has_txn)
        return sbl_err_set(err, SBL_E_InvalidOptions, "'autocommit' and 'startTransaction' "
                           "require a txnNumber");
    if (start && !cur.in_txn)
        return sbl_err_set(err, SBL_E_InvalidOptions, "'startTransaction' needs 'autocommit: "
                           "false'");
    if (!cur.has_lsid)
        return 0;
    if (cur.has_txn) /* only then does a shard hear of the session */
        rt_auth_uid(cur.uid);
    cur.on = true;
    cur.write = is_write(name);
    if (cur.in_txn)
        return txn_enter(name, cmd, start, err);
    return 0;
}

bool rt_sess_ids(uint8_t id[16], uint8_t uid[32], int64_t *txnp)
{
    if (!cur.on || !cur.has_txn)
        return false;
    memcpy(id, cur.id, 16);
    memcpy(uid, cur.uid, 32);
    *txnp = cur.txn;
    return true;
}

void rt_sess_end(void)
{
    memset(&cur, 0, sizeof(cur));
}

bool rt_sess_retryable(void)
{
    return cur.on && cur.has_txn;
}

bool rt_sess_in_txn(void)
{
    return cur.on && cur.in_txn;
}

bool rt_sess_suspend(bool off)
{
    bool was = cur.on;
    cur.on = !off && cur.has_lsid;
    return was;
}

static void append_lsid(bson_t *out, const uint8_t id[16], const uint8_t uid[32])
{
    bson_t l;
    BSON_APPEND_DOCUMENT_BEGIN(out, "lsid", &l);
    BSON_APPEND_BINARY(&l, "id", BSON_SUBTYPE_UUID, id, 16);
    BSON_APPEND_BINARY(&l, "uid", BSON_SUBTYPE_BINARY, uid, 32);
    bson_append_document_end(out, &l);
}

bool rt_sess_extra(int shard, const bson_t *cmd, bson_t *extra)
{
    if (!cur.on || !cur.has_txn || shard < 0 || shard >= RT_MAX_SHARDS)
        return false;
    append_lsid(extra, cur.id, cur.uid);
    BSON_APPEND_INT64(extra, "txnNumber", cur.txn);
    if (!cur.in_txn)
        return true;
    BSON_APPEND_BOOL(extra, "autocommit", false);
    pthread_mutex_lock(&tx_lock);
    rt_txn_t *t = find_locked(false);
    if (t != NULL && t->txn == cur.txn && t->state == TX_ACTIVE) {
        bson_iter_t it;
        if (!t->part[shard]) {
            t->part[shard] = true;
            if (t->first < 0)
                t->first = shard;
            BSON_APPEND_BOOL(extra, "startTransaction", true);
            if (t->read_concern != NULL && !bson_iter_init_find(&it, cmd, "readConcern"))
                BSON_APPEND_DOCUMENT(extra, "readConcern", t->read_concern);
        }
        if (cur.write)
            t->wrote[shard] = true;
    }
    pthread_mutex_unlock(&tx_lock);
    return true;
}

void rt_sess_reply(int shard, bool started, const bson_t *reply)
{
    /* A shard refused the command before its transaction began
     * (StaleConfig): the next statement there starts the transaction
     * again, as mongos retries a first statement. */
    if (!started || !cur.on || !cur.in_txn || shard < 0 || shard >= RT_MAX_SHARDS)
        return;
    if (reply == NULL || !rt_stale_code(rt_reply_code(reply)))
        return; /* after a lost connection it may have begun: abort reaches it */
    pthread_mutex_lock(&tx_lock);
    rt_txn_t *t = find_locked(false);
    if (t != NULL && t->txn == cur.txn) {
        t->part[shard] = false;
        t->wrote[shard] = false;
        if (t->first == shard)
            t->first = -1; /* the next shard contacted coordinates */
    }
    pthread_mutex_unlock(&tx_lock);
}

/* Send {verb: 1} (commitTransaction or abortTransaction) with the session's
 * fields and wc (NULL: none) to shard s. */
static int end_on(int s, const char *verb, const bson_iter_t *wc, bson_t *reply, sbl_err_t *err)
{
    bson_t c = BSON_INITIALIZER;
    BSON_APPEND_INT32(&c, verb, 1);
    if (wc != NULL)
        sbl_append_iter(&c, "writeConcern", -1, wc);
    int rc = rt_run(s, "admin", &c, reply, err); /* rt_sess_extra adds lsid ... */
    bson_destroy(&c);
    return rc;
}

/* The participants of the current transaction (writers into wrote), the
 * first one contacted first, after moving it to state; returns how many. */
static int participants(int state, int *shards, bool *wrote)
{
    int n = 0;
    pthread_mutex_lock(&tx_lock);
    rt_txn_t *t = find_locked(false);
    if (t != NULL && t->txn == cur.txn) {
        if (t->first >= 0 && t->part[t->first]) {
            wrote[n] = t->wrote[t->first];
            shards[n++] = t->first;
        }
        for (int s = 0; s < RT_MAX_SHARDS; s++)
            if (t->part[s] && s != t->first) {
                wrote[n] = t->wrote[s];
                shards[n++] = s;
            }
        if (state != TX_NONE)
            t->state = state;
    }
    pthread_mutex_unlock(&tx_lock);
    return n;
}

static void abort_everywhere(void)
{
    int shards[RT_MAX_SHARDS];
    bool wrote[RT_MAX_SHARDS];
    int n = participants(TX_ABORTED, shards, wrote);
    for (int i = 0; i < n; i++) {
        bson_t r;
        sbl_err_t e = {0};
        if (end_on(shards[i], "abortTransaction", NULL, &r, &e) == 0)
            bson_destroy(&r);
    }
}

/* Two-phase commit: coordinateCommitTransaction {participants} to the
 * first participant (shards[0]), again after a network error (the
 * coordinator answers a repeat with the first one's outcome).  The
 * coordinator's answer is the client's; after an abort (its error reply)
 * the transaction is aborted everywhere already.  An outcome never heard
 * leaves the router's record active: a retried commit asks again. */
static int commit_2pc(const int *shards, int n, const bson_iter_t *wc, bson_t *reply,
                      sbl_err_t *err)
{
    bson_t c = BSON_INITIALIZER, arr, el, r;
    BSON_APPEND_INT32(&c, "coordinateCommitTransaction", 1);
    BSON_APPEND_ARRAY_BEGIN(&c, "participants", &arr);
    for (int i = 0; i < n; i++) {
        char k[16];
        snprintf(k, sizeof(k), "%d", i);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, k, &el);
        BSON_APPEND_UTF8(&el, "shardId", rt_shard_id(shards[i]));
        BSON_APPEND_UTF8(&el, "host", rt_shard_host(shards[i]));
        bson_append_document_end(&arr, &el);
    }
    bson_append_array_end(&c, &arr);
    if (wc != NULL)
        sbl_append_iter(&c, "writeConcern", -1, wc);
    int rc = 0;
    cur.decided = true; /* from here only the coordinator ends the transaction */
    for (int tries = 0; tries < 3; tries++) {
        sbl_err_clear(err);
        if ((rc = rt_run(shards[0], "admin", &c, &r, err)) == 0)
            break; /* rt_sess_extra added lsid, txnNumber, autocommit */
        if (rc != SBL_E_HostUnreachable)
            break;
    }
    bson_destroy(&c);
    if (rc != 0)
        return rc;
    int code = rt_reply_code(&r);
    if (code != 0) {
        bson_reinit(reply);
        bson_copy_to_excluding_noinit(&r, reply, "$clusterTime", "operationTime", NULL);
    }
    bson_destroy(&r);
    int sh[RT_MAX_SHARDS];
    bool wrote[RT_MAX_SHARDS];
    participants(code == 0 ? TX_COMMITTED : TX_ABORTED, sh, wrote);
    return 0;
}

int rt_cmd_commit_txn(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    if (!cur.in_txn)
        return sbl_err_set(err, SBL_E_InvalidOptions, "commitTransaction must be run within "
                           "a transaction");
    if (strcmp(db, "admin") != 0)
        return sbl_err_set(err, SBL_E_Unauthorized, "commitTransaction may only be run "
                           "against the admin database.");
    bson_iter_t wcit;
    bool has_wc = bson_iter_init_find(&wcit, cmd, "writeConcern");
    int shards[RT_MAX_SHARDS];
    bool wrote[RT_MAX_SHARDS];
    int n = participants(TX_NONE, shards, wrote), writers = 0;
    for (int i = 0; i < n; i++)
        writers += wrote[i];
    if (writers > 1)
        return commit_2pc(shards, n, has_wc ? &wcit : NULL, reply, err);
    /* the shards that only read first, the one that wrote last */
    int rc = 0;
    for (int pass = 0; pass < 2 && rc == 0; pass++)
        for (int i = 0; i < n && rc == 0; i++) {
            if (wrote[i] != (pass == 1))
                continue;
            bson_t r;
            if ((rc = end_on(shards[i], "commitTransaction", has_wc ? &wcit : NULL, &r, err)))
                break;
            if (rt_reply_code(&r) != 0 || pass == 1 || i == n - 1) {
                bson_reinit(reply); /* an error, or the last shard's answer */
                bson_copy_to_excluding_noinit(&r, reply, "$clusterTime", "operationTime",
                                              NULL);
                if (rt_reply_code(&r) != 0)
                    rc = -1;
            }
            bson_destroy(&r);
        }
    if (rc != 0) {
        abort_everywhere();
        return rc < 0 ? 0 : rc; /* -1: a shard's error reply is the answer */
    }
    participants(TX_COMMITTED, shards, wrote);
    return 0;
}

int rt_cmd_abort_txn(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    if (!cur.in_txn)
        return sbl_err_set(err, SBL_E_InvalidOptions, "abortTransaction must be run within a "
                           "transaction");
    pthread_mutex_lock(&tx_lock);
    rt_txn_t *t = find_locked(false);
    int state = t != NULL && t->txn == cur.txn ? t->state : TX_NONE;
    pthread_mutex_unlock(&tx_lock);
    if (state == TX_COMMITTED)
        return sbl_err_set(err, SBL_E_TransactionCommitted, "Transaction with { txnNumber: "
                           "%lld } has been committed.", (long long)cur.txn);
    abort_everywhere();
    return 0;
}

/* A document moving to another shard in a retryable write (rt_move.c): a
 * child session of the client's user runs the move as a transaction, as
 * mongos 7.0's internal transactions do. */
int rt_sess_internal_begin(sbl_err_t *err)
{
    if (!cur.on || !cur.has_txn || cur.in_txn)
        return sbl_err_set(err, SBL_E_InternalError,
                           "an internal transaction runs on behalf "
                           "of a retryable write only");
    outer = cur;
    if (getrandom(cur.id, sizeof(cur.id), 0) != (ssize_t)sizeof(cur.id))
        return sbl_err_set(err, SBL_E_InternalError, "no random bytes for a session id");
    cur.id[6] = (uint8_t)((cur.id[6] & 0x0f) | 0x40); /* UUID version 4 */
    cur.id[8] = (uint8_t)((cur.id[8] & 0x3f) | 0x80);
    cur.txn = 0;
    cur.in_txn = cur.write = true;
    cur.decided = false;
    cur.read_at = 0;
    bson_t none = BSON_INITIALIZER;
    int rc = txn_enter("update", &none, true, err);
    if (rc != 0)
        cur = outer;
    return rc;
}

int rt_sess_internal_end(bool commit, const bson_t *client_cmd, sbl_err_t *err)
{
    int rc = 0;
    if (commit) {
        bson_t c = BSON_INITIALIZER, r = BSON_INITIALIZER;
        bson_iter_t wc;
        BSON_APPEND_INT32(&c, "commitTransaction", 1);
        if (bson_iter_init_find(&wc, client_cmd, "writeConcern"))
            sbl_append_iter(&c, "writeConcern", -1, &wc);
        rc = rt_cmd_commit_txn("admin", &c, &r, err);
        if (rc == 0 && bson_has_field(&r, "ok") && rt_reply_code(&r) != 0) /* ok: no "ok" */
            rc = rt_reply_error(&r, "committing the document's move", err);
        bson_destroy(&c);
        bson_destroy(&r);
    } else {
        abort_everywhere();
    }
    forget(cur.id, cur.uid); /* the child session is not used again */
    cur = outer;
    return rc;
}

void rt_sess_after(int rc, const bson_t *reply)
{
    if (!cur.on || !cur.in_txn || cur.decided)
        return;
    bson_iter_t it;
    /* handlers leave ok out when it is 1; a shard's error reply has ok: 0 */
    bool failed = rc != 0 || (bson_has_field(reply, "ok") && rt_reply_code(reply) != 0) ||
                  bson_iter_init_find(&it, reply, "writeErrors");
    if (failed)
        abort_everywhere();
}

void rt_sess_error_labels(int code, bson_t *reply)
{
    const char *label = NULL;
    bool net = code == SBL_E_HostUnreachable || code == SBL_E_NotWritablePrimary ||
               code == SBL_E_PrimarySteppedDown || code == SBL_E_InterruptedDueToReplStateChange;
    if (cur.decided && net)
        label = "UnknownTransactionCommitResult"; /* the coordinator may have committed */
    else if (cur.on && cur.in_txn &&
             (net || code == SBL_E_NoSuchTransaction || code == SBL_E_WriteConflict ||
              rt_stale_code(code)))
        label = "TransientTransactionError";
    else if (cur.on && cur.has_txn && net)
        label = "RetryableWriteError";
    if (label == NULL)
        return;
    bson_t a;
    BSON_APPEND_ARRAY_BEGIN(reply, "errorLabels", &a);
    BSON_APPEND_UTF8(&a, "0", label);
    bson_append_array_end(reply, &a);
}

/* ---- session commands ---- */

int rt_cmd_start_session(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    uint8_t id[16];
    if (getrandom(id, sizeof(id), 0) != (ssize_t)sizeof(id))
        return sbl_err_set(err, SBL_E_InternalError, "no random bytes for a session id");
    id[6] = (uint8_t)((id[6] & 0x0f) | 0x40); /* UUID version 4 */
    id[8] = (uint8_t)((id[8] & 0x3f) | 0x80);
    bson_t d;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "id", &d);
    BSON_APPEND_BINARY(&d, "id", BSON_SUBTYPE_UUID, id, 16);
    bson_append_document_end(reply, &d);
    BSON_APPEND_INT32(reply, "timeoutMinutes", RT_SESSION_MINUTES);
    return 0;
}

/* cmd to every shard at once, without the current session's fields; the
 * answers are not looked at (a shard that never saw a session has nothing
 * to do). */
static void to_every_shard(const bson_t *cmd)
{
    int ns = 0;
    int sh[RT_MAX_SHARDS], rcs[RT_MAX_SHARDS];
    bson_t rs[RT_MAX_SHARDS];
    const bson_t *cmds[RT_MAX_SHARDS];
    sbl_err_t errs[RT_MAX_SHARDS];
    memset(errs, 0, sizeof(errs));
    for (int s = 0; s < rt_shard_count(); s++)
        if (!rt_shard_removed(s)) {
            sh[ns] = s;
            cmds[ns++] = cmd;
        }
    bool was = rt_sess_suspend(true);
    rt_run_many(ns, sh, "admin", cmds, rs, rcs, errs);
    rt_sess_suspend(!was);
    for (int s = 0; s < ns; s++)
        bson_destroy(&rs[s]);
}

/* endSessions, killSessions, refreshSessions: every lsid gets the client's
 * uid (unless it names one) and the command goes to every shard; the
 * router forgets the sessions' transactions. */
static int forward_sessions(const char *verb, const bson_t *cmd, sbl_err_t *err)
{
    bson_iter_t it, el, f;
    if (!bson_iter_init_find(&it, cmd, verb) || !BSON_ITER_HOLDS_ARRAY(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch, "BSON field '%s' is the wrong type, "
                           "expected type 'array'", verb);
    uint8_t uid[32];
    rt_auth_uid(uid);
    bson_t fwd = BSON_INITIALIZER, arr;
    BSON_APPEND_ARRAY_BEGIN(&fwd, verb, &arr);
    bson_iter_recurse(&it, &el);
    uint32_t n = 0;
    while (bson_iter_next(&el)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&el) || !bson_iter_recurse(&el, &f)) {
            bson_destroy(&fwd);
            return sbl_err_set(err, SBL_E_TypeMismatch, "%s: every element must be an lsid "
                               "document", verb);
        }
        const uint8_t *id = NULL, *u = uid;
        while (bson_iter_next(&f)) {
            bson_subtype_t st;
            uint32_t len = 0;
            const uint8_t *data;
            if (!BSON_ITER_HOLDS_BINARY(&f))
                continue;
            bson_iter_binary(&f, &st, &len, &data);
            if (strcmp(bson_iter_key(&f), "id") == 0 && len == 16)
                id = data;
            else if (strcmp(bson_iter_key(&f), "uid") == 0 && len == 32)
                u = data;
        }
        if (id == NULL)
            continue;
        char k[16];
        const char *ks;
        bson_uint32_to_string(n++, &ks, k, sizeof(k));
        bson_t l;
        BSON_APPEND_DOCUMENT_BEGIN(&arr, ks, &l);
        BSON_APPEND_BINARY(&l, "id", BSON_SUBTYPE_UUID, id, 16);
        BSON_APPEND_BINARY(&l, "uid", BSON_SUBTYPE_BINARY, u, 32);
        bson_append_document_end(&arr, &l);
        if (strcmp(verb, "refreshSessions") == 0)
            continue;
        forget(id, u);
    }
    bson_append_array_end(&fwd, &arr);
    if (n > 0)
        to_every_shard(&fwd);
    bson_destroy(&fwd);
    return 0;
}

int rt_cmd_end_sessions(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    return forward_sessions("endSessions", cmd, err);
}

int rt_cmd_kill_sessions(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    return forward_sessions("killSessions", cmd, err);
}

int rt_cmd_refresh_sessions(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    return forward_sessions("refreshSessions", cmd, err);
}

/* killAllSessions, killAllSessionsByPattern: to every shard as they are.
 * The router's record of a killed transaction stays: its next statement or
 * commit gets the shards' NoSuchTransaction. */
int rt_cmd_kill_all_sessions(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    bson_t fwd = BSON_INITIALIZER;
    rt_copy_cmd(cmd, &fwd, NULL);
    to_every_shard(&fwd);
    bson_destroy(&fwd);
    return 0;
}
