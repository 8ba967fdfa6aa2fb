/*
 * repl_apply.c: a secondary applies the entries it fetches on a fixed pool
 * of writer threads (replWriterThreadCount), as mongod's oplog applier: an
 * entry goes to the writer chosen by a hash of its namespace and document
 * _id (of its namespace alone for a capped collection, whose insertion order
 * is the oplog's), so one document's entries run in order on one writer;
 * commands, transactions and prepared transactions are barriers, applied
 * alone by the fetching thread once every writer is idle (repl_sync.c).
 * (mongod relaxes unique indexes on secondaries instead; Sable serialises
 * such a namespace.)
 *
 * Each writer has its own storage session.  It runs its entry's change ahead
 * of its turn (the entry's place in the stream, "seq"), then waits for its
 * turn before it takes the oplog's insert lock (sbl_rs_apply_turn, from
 * sbl_oplog_append_raw), writes the entry and commits, at the entry's ts as
 * ever.  So the writers' work runs in parallel and their commits in ts
 * order.
 *
 * What must stay true:
 *  - Oplog positions, commits and the visibility point follow ts order: an
 *    entry takes the lock only at its turn, and the turn moves on only once
 *    its transaction ended committed.  The applied optime (the visibility
 *    point) therefore never covers an entry that is not applied, and there
 *    are never holes below it.
 *  - An entry whose change failed ahead of its turn (a duplicate key another
 *    document's earlier entry would have freed, a write conflict) is run
 *    again at its turn, when every earlier entry has committed: exactly what
 *    the serial applier did.  Writers rarely touch the same keys (a
 *    namespace with a unique secondary index or capped has one writer);
 *    should the entry holding the turn need a key a later one wrote, the
 *    later ones waiting for their turn give way after STALL_MS (their
 *    transactions roll back; they run again at their turn).
 *  - A failed entry stops the stream: no later entry commits; the fetching
 *    thread sees it at its next dispatch or drain and stops syncing.
 *  - A retryable write's session record (config.transactions) is written at
 *    the entry's turn in a transaction of the writer's second session (at
 *    the entry's ts), so a session's consecutive entries on different
 *    writers do not conflict on it; it commits just before the entry does.
 */
#include "repl/repl_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"

#define MAX_WRITERS 256
#define NONE UINT64_MAX
#define INFLIGHT_PER_WRITER 64 /* entries handed out and not finished, per writer */
#define RING (MAX_WRITERS * INFLIGHT_PER_WRITER)
#define STALL_MS 300 /* a turn that long unmoved: the entries waiting for theirs step back */

typedef struct job {
    struct job *next;
    uint64_t seq;
    bson_t e;
} job_t;

static struct {
    pthread_mutex_t mu;
    /* Each writer waits on its own condition (a job for it, its turn), the
     * fetching thread on main_cv (room to hand out, the drain): a turn that
     * moves wakes the one writer whose entry is next, not all of them. */
    pthread_cond_t cv[MAX_WRITERS];
    pthread_cond_t main_cv;
    bool main_waiting;
    int owner[RING];   /* the writer of entry seq, at seq % RING */
    int n;             /* writers running */
    pthread_t th[MAX_WRITERS];
    job_t *head[MAX_WRITERS], *tail[MAX_WRITERS];
    uint64_t next_seq; /* the next entry handed out */
    _Atomic uint64_t turn; /* the entry that may take the oplog's lock now (set under mu) */
    uint64_t done;     /* entries finished (applied, failed or dropped) */
    uint64_t failed_at; /* the first entry that failed (NONE) */
    sbl_err_t fail_err;
    int64_t turn_ms;   /* when the turn last moved */
    bool stop;
    bool (*go_on)(void *);
    void *go_on_arg;
    void (*applied)(void *);
    void *applied_arg;
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .main_cv = PTHREAD_COND_INITIALIZER,
          .failed_at = NONE};

static atomic_int writer_threads;

/* The entry this writer thread is applying, whether it holds its turn, and
 * its second session (session records). */
static _Thread_local int cur_writer;
static _Thread_local job_t *cur_job;
static _Thread_local bool cur_has_turn;
static _Thread_local sbl_session_t *record_session;

/* mongod's min(16, 2 x cores), except on one or two cores: there each
 * entry's hand-off to a writer costs more than the writers overlap
 * (scripts/apply-rate.py: 4 writers 10,400-16,100 entries/s against
 * 18,600-24,100 serial), so the applier applies alone. */
int sbl_rs_default_writer_threads(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores <= 2)
        return 1;
    return cores * 2 < 16 ? (int)cores * 2 : 16;
}

void sbl_repl_set_writer_threads(int n)
{
    atomic_store(&writer_threads, n);
}

int sbl_repl_writer_threads(void)
{
    int n = atomic_load(&writer_threads);
    return n > 0 ? n : sbl_rs_default_writer_threads();
}

/* ---- a writer ------------------------------------------------------------------ */

/* A failure or the stop: every writer and the fetching thread look again. */
static void wake_all_locked(void)
{
    for (int i = 0; i < pool.n; i++)
        pthread_cond_broadcast(&pool.cv[i]);
    pthread_cond_signal(&pool.main_cv);
}

/* Wait for job j's turn (lock held).  False when an earlier entry failed or
 * the pool stops: j must not commit. */
static bool wait_turn_locked(const job_t *j)
{
    while (pool.turn != j->seq) {
        if (pool.failed_at < j->seq || pool.stop)
            return false;
        pthread_cond_wait(&pool.cv[cur_writer], &pool.mu);
    }
    return true;
}

int sbl_rs_apply_turn(sbl_err_t *err)
{
    job_t *j = cur_job;
    if (j == NULL || cur_has_turn)
        return 0;
    pthread_mutex_lock(&pool.mu);
    while (pool.turn != j->seq) {
        if (pool.failed_at < j->seq || pool.stop) {
            pthread_mutex_unlock(&pool.mu);
            return sbl_err_set(err, SBL_E_Interrupted, "an earlier oplog entry failed to apply");
        }
        /* The turn stalls: the entry holding it may need a write of ours
         * (not WriteConflict: the command layer would retry it in place). */
        if (sbl_now_ms() - pool.turn_ms > STALL_MS) {
            pthread_mutex_unlock(&pool.mu);
            return sbl_err_set(err, SBL_E_Interrupted, "the oplog entry before this one "
                               "waits: this one is applied again at its turn");
        }
        struct timespec t = sbl_deadline_in_ms(50);
        pthread_cond_timedwait(&pool.cv[cur_writer], &pool.mu, &t);
    }
    pthread_mutex_unlock(&pool.mu);
    cur_has_turn = true;
    return 0;
}

static int group_note_record(sbl_session_t *s, const bson_t *doc, bool *notedp, sbl_err_t *err);

int sbl_rs_apply_record(sbl_session_t *s, const bson_t *doc, uint64_t ts, sbl_err_t *err)
{
    bool noted = false;
    if (cur_job == NULL) { /* in a group, written at its commit */
        SBL_RET(group_note_record(s, doc, &noted, err));
        if (noted)
            return 0;
    }
    if (cur_job == NULL || !bson_has_field(doc, "txnNumber")) /* no record to write */
        return sbl_txn_record_applied(s, doc, err);
    if (record_session == NULL && (record_session = sbl_session_open()) == NULL)
        return sbl_err_set(err, SBL_E_InternalError, "cannot open a storage session");
    int rc;
    SBL_RET(sbl_txn_begin(record_session, err));
    if ((rc = sbl_txn_set_commit_ts(record_session, ts, err)) == 0 &&
        (rc = sbl_txn_record_applied(record_session, doc, err)) == 0)
        return sbl_txn_commit(record_session, err);
    sbl_txn_abort(record_session);
    return rc;
}

/* Apply j: ahead of its turn, then, if that failed, again at its turn as
 * the serial applier would (retrying write conflicts).  Returns 0 once the
 * entry committed with its turn held. */
static int run_job(job_t *j, sbl_err_t *err)
{
    pthread_mutex_lock(&pool.mu);
    bool dropped = pool.failed_at < j->seq || pool.stop;
    bool (*go_on)(void *) = pool.go_on;
    void *go_on_arg = pool.go_on_arg;
    pthread_mutex_unlock(&pool.mu);
    if (dropped)
        return sbl_err_set(err, SBL_E_Interrupted, "an earlier oplog entry failed to apply");
    if (go_on != NULL && !go_on(go_on_arg))
        return sbl_err_set(err, SBL_E_InterruptedDueToReplStateChange, "the member's state or "
                           "term changed while applying");
    cur_job = j;
    cur_has_turn = false;
    int rc = sbl_rs_apply_entry_ahead(&j->e, err);
    for (int attempt = 0; rc != 0; attempt++) {
        pthread_mutex_lock(&pool.mu);
        bool turn = wait_turn_locked(j);
        pthread_mutex_unlock(&pool.mu);
        if (!turn || (attempt > 0 && rc != SBL_E_WriteConflict) || attempt >= 100)
            break;
        if (attempt > 0)
            usleep((useconds_t)(attempt < 10 ? attempt : 10) * 1000);
        cur_has_turn = true;
        sbl_err_clear(err);
        rc = sbl_rs_apply_entry(&j->e, err);
    }
    if (rc == 0 && !cur_has_turn) { /* committed without taking the lock: none the less in order */
        pthread_mutex_lock(&pool.mu);
        if (!wait_turn_locked(j))
            rc = sbl_err_set(err, SBL_E_Interrupted, "an earlier oplog entry failed to apply");
        pthread_mutex_unlock(&pool.mu);
    }
    cur_job = NULL;
    return rc;
}

static void *writer_main(void *arg)
{
    int w = (int)(intptr_t)arg;
    char name[32];
    snprintf(name, sizeof(name), "ReplWriter-%d", w);
    sbl_thread_name(name);
    cur_writer = w;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        while (pool.head[w] == NULL && !pool.stop)
            pthread_cond_wait(&pool.cv[w], &pool.mu);
        job_t *j = pool.head[w];
        if (j == NULL)
            break;
        pool.head[w] = j->next;
        if (pool.head[w] == NULL)
            pool.tail[w] = NULL;
        pthread_mutex_unlock(&pool.mu);
        sbl_err_t err;
        sbl_err_clear(&err);
        int rc = run_job(j, &err);
        if (rc == 0)
            sbl_rs_count_applied_op(&j->e);
        pthread_mutex_lock(&pool.mu);
        void (*applied)(void *) = pool.applied;
        void *applied_arg = pool.applied_arg;
        pthread_mutex_unlock(&pool.mu);
        if (rc == 0 && applied != NULL) /* before done: a drain may then end the stream */
            applied(applied_arg);
        pthread_mutex_lock(&pool.mu);
        if (rc == 0) {
            pool.turn = j->seq + 1;
            pool.turn_ms = sbl_now_ms();
        } else if (j->seq < pool.failed_at) {
            pool.failed_at = j->seq;
            pool.fail_err = err;
        }
        pool.done++;
        if (rc != 0)
            wake_all_locked();
        else if (pool.turn < pool.next_seq)
            pthread_cond_signal(&pool.cv[pool.owner[pool.turn % RING]]);
        if (pool.main_waiting)
            pthread_cond_signal(&pool.main_cv);
        pthread_mutex_unlock(&pool.mu);
        bson_destroy(&j->e);
        free(j);
        pthread_mutex_lock(&pool.mu);
    }
    pthread_mutex_unlock(&pool.mu);
    if (record_session != NULL)
        sbl_session_close(record_session);
    record_session = NULL;
    sbl_session_release_thread();
    return NULL;
}

int sbl_rs_apply_pool_start(void)
{
    int n = sbl_repl_writer_threads();
    if (n == 1) { /* one writer: the fetching thread applies, as before, with no hand-off */
        pool.n = 0;
        return 0;
    }
    pthread_mutex_lock(&pool.mu);
    pool.stop = false;
    pool.next_seq = 0;
    atomic_store(&pool.turn, 0);
    pool.done = 0;
    pool.failed_at = NONE;
    pthread_mutex_unlock(&pool.mu);
    for (int i = 0; i < n; i++)
        pthread_cond_init(&pool.cv[i], NULL);
    for (pool.n = 0; pool.n < n; pool.n++)
        if (pthread_create(&pool.th[pool.n], NULL, writer_main, (void *)(intptr_t)pool.n) != 0)
            break;
    return pool.n > 0 ? 0 : -1;
}

void sbl_rs_apply_pool_stop(void)
{
    pthread_mutex_lock(&pool.mu);
    pool.stop = true;
    wake_all_locked();
    pthread_mutex_unlock(&pool.mu);
    for (int i = 0; i < pool.n; i++)
        pthread_join(pool.th[i], NULL);
    pool.n = 0;
}

/* ---- handing entries out ---------------------------------------------------------- */

/* The element bytes of doc's _id (NULL: none). */
static const uint8_t *id_bytes(const bson_t *doc, size_t *lenp)
{
    bson_iter_t it;
    if (doc == NULL || !bson_iter_init_find(&it, doc, "_id"))
        return NULL;
    const uint8_t *raw = bson_get_data(doc);
    *lenp = it.next_off - it.off;
    return raw + it.off;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

/* Whether a namespace's entries keep their order across documents (one
 * writer for the namespace): a capped collection (its insertion order is the
 * oplog's) or one with a unique secondary index (a value moving from one
 * document to another: two writers would conflict on its key).  Cached
 * since the last barrier; only the fetching thread uses it. */
#define NS_CACHE 32
static struct {
    char ns[SBL_NS_BUF];
    bool serial;
} ns_cache[NS_CACHE];
static int ns_cached;

static bool ns_serial(const char *ns)
{
    for (int i = 0; i < ns_cached; i++)
        if (strcmp(ns_cache[i].ns, ns) == 0)
            return ns_cache[i].serial;
    sbl_coll_t *c = NULL;
    sbl_err_t err;
    sbl_err_clear(&err);
    bool serial = false;
    if (sbl_coll_open(sbl_session_get(), ns, false, &c, NULL, &err) == 0) {
        serial = sbl_coll_capped(c, NULL, NULL);
        sbl_index_t **ix = NULL;
        size_t n = 0;
        if (!serial && sbl_index_count(c) > 0) {
            sbl_index_list(c, true, &ix, &n);
            for (size_t i = 0; i < n && !serial; i++)
                serial = sbl_index_unique(ix[i]);
            sbl_index_list_free(ix, n);
        }
        sbl_coll_release(c);
    }
    int i = ns_cached < NS_CACHE ? ns_cached++ : (int)(fnv(0, ns, strlen(ns)) % NS_CACHE);
    snprintf(ns_cache[i].ns, sizeof(ns_cache[i].ns), "%s", ns);
    ns_cache[i].serial = serial;
    return serial;
}

/* The writer for entry e: by namespace and _id (namespace alone: ns_serial). */
static int writer_of(const bson_t *e)
{
    bson_iter_t it;
    bson_t o = BSON_INITIALIZER, o2 = BSON_INITIALIZER;
    const char *ns = "";
    uint64_t h = 0xcbf29ce484222325ULL;
    if (bson_iter_init_find(&it, e, "ns") && BSON_ITER_HOLDS_UTF8(&it))
        ns = bson_iter_utf8(&it, NULL);
    h = fnv(h, ns, strlen(ns) + 1);
    if (ns[0] != '\0' && !ns_serial(ns)) {
        bool has_o2 = bson_iter_init_find(&it, e, "o2") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
                      sbl_iter_doc(&it, &o2);
        bool has_o = bson_iter_init_find(&it, e, "o") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
                     sbl_iter_doc(&it, &o);
        size_t n = 0;
        const uint8_t *id = has_o2 ? id_bytes(&o2, &n) : NULL;
        if (id == NULL && has_o)
            id = id_bytes(&o, &n);
        if (id != NULL)
            h = fnv(h, id, n);
    }
    return (int)((h ^ (h >> 29)) % (uint64_t)pool.n);
}

bool sbl_rs_apply_is_barrier(const bson_t *e)
{
    bson_iter_t it;
    const char *op = bson_iter_init_find(&it, e, "op") && BSON_ITER_HOLDS_UTF8(&it)
                         ? bson_iter_utf8(&it, NULL) : "c";
    return op[0] == 'c' || pool.n == 0;
}

void sbl_rs_apply_stream(bool (*go_on)(void *), void *go_on_arg, void (*applied)(void *),
                         void *applied_arg)
{
    pthread_mutex_lock(&pool.mu);
    pool.go_on = go_on;
    pool.go_on_arg = go_on_arg;
    pool.applied = applied;
    pool.applied_arg = applied_arg;
    pthread_mutex_unlock(&pool.mu);
    ns_cached = 0;
}

/* The first failure since the last drain into err (lock held). */
static int failure_locked(sbl_err_t *err)
{
    if (pool.failed_at == NONE)
        return 0;
    *err = pool.fail_err;
    return err->code != 0 ? err->code : SBL_E_InternalError;
}

int sbl_rs_apply_dispatch(const bson_t *e, sbl_err_t *err)
{
    job_t *j = malloc(sizeof(*j));
    if (j == NULL)
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    bson_copy_to(e, &j->e);
    j->next = NULL;
    int w = writer_of(e);
    pthread_mutex_lock(&pool.mu);
    while (pool.next_seq - pool.done >= (uint64_t)pool.n * INFLIGHT_PER_WRITER &&
           pool.failed_at == NONE) {
        pool.main_waiting = true;
        pthread_cond_wait(&pool.main_cv, &pool.mu);
        pool.main_waiting = false;
    }
    int rc = failure_locked(err);
    if (rc != 0) {
        pthread_mutex_unlock(&pool.mu);
        bson_destroy(&j->e);
        free(j);
        return rc;
    }
    j->seq = pool.next_seq++;
    pool.owner[j->seq % RING] = w;
    if (pool.done == j->seq) /* nothing in flight: the turn starts moving now */
        pool.turn_ms = sbl_now_ms();
    if (pool.tail[w] != NULL)
        pool.tail[w]->next = j;
    else
        pool.head[w] = j;
    pool.tail[w] = j;
    pthread_cond_signal(&pool.cv[w]);
    pthread_mutex_unlock(&pool.mu);
    return 0;
}

int sbl_rs_apply_drain(sbl_err_t *err)
{
    pthread_mutex_lock(&pool.mu);
    while (pool.done != pool.next_seq) {
        pool.main_waiting = true;
        pthread_cond_wait(&pool.main_cv, &pool.mu);
        pool.main_waiting = false;
    }
    int rc = failure_locked(err);
    pool.failed_at = NONE; /* what failed stays unapplied: the stream starts again */
    pool.turn = pool.next_seq;
    pool.turn_ms = sbl_now_ms();
    pthread_mutex_unlock(&pool.mu);
    ns_cached = 0; /* a barrier may create, drop or convert a collection */
    return rc;
}

/* ---- groups: the serial applier's entries in few transactions ----------------- */

/*
 * With no writers (replWriterThreadCount=1, the default on two cores), the
 * fetching thread applies consecutive document entries (i, u, d, n) of
 * ordinary collections in one WiredTiger transaction, a group, as mongod
 * applies groupable inserts: each entry's change and its copy in our oplog
 * are written at the entry's own ts (WiredTiger takes the commit timestamp
 * current at each update; they only grow within a group), and the group
 * commits once.  The visibility point (the applied optime) moves at that
 * commit, over the whole group, never over part of one.  A group ends at a
 * batch's end (repl_sync.c, before the fetch that might wait), before any
 * other entry, and at GROUP_MAX_OPS entries or GROUP_MAX_BYTES.
 *
 * Any failure in a group (an entry whose change fails, the commit) rolls
 * the whole group back and applies its entries again one at a time with the
 * serial rules (sbl_rs_apply_entry), so what happens then is exactly what
 * happened before groups; the group keeps its entries' bytes for that.
 *
 * Session records (config.transactions) are written once per session per
 * group, as mongod's applier writes them once per session per batch
 * (SessionUpdateTracker): a retryable write's entry only notes its session
 * (up to GROUP_MAX_SESSIONS of them; any other writes its record at once),
 * and before the commit each noted session's record is written from its
 * last entry, at that entry's ts (then the commit timestamp goes back to
 * the group's newest).  The applied optime and the stable timestamp move
 * at the group's commit, never inside it, so no reader and no checkpoint
 * sees a group's entries without their sessions' records.  Eight client
 * threads' sessions: 8 record writes for a group of 500 entries, not 500.
 */
#define GROUP_MAX_OPS 500
#define GROUP_MAX_BYTES (16 * 1024 * 1024)
#define GROUP_MAX_SESSIONS 64

static struct {
    bool open;   /* a transaction is open on the fetching thread's session */
    size_t n;    /* entries applied in it */
    uint8_t *buf; /* their bytes, back to back */
    size_t len, cap;
    const bson_t *cur; /* the entry being applied (NULL: none) */
    size_t cur_off;    /* and where its copy is in buf */
    uint64_t last_ts; /* the newest entry's ts */
    /* the sessions whose record is written at the commit: the offset in buf
     * of each one's last entry, and of that entry's lsid value */
    size_t nsess;
    size_t sess_entry[GROUP_MAX_SESSIONS];
    size_t sess_lsid[GROUP_MAX_SESSIONS];
    uint32_t sess_lsid_len[GROUP_MAX_SESSIONS];
} group;

/* The collection sbl_rs_group_takes opened for entry takes_doc, kept for
 * its sbl_rs_group_apply (which releases it): one lookup per entry. */
static sbl_coll_t *takes_coll;
static const bson_t *takes_doc;

static void takes_drop(void)
{
    if (takes_coll != NULL)
        sbl_coll_release(takes_coll);
    takes_coll = NULL;
    takes_doc = NULL;
}

/* Whether ns is a collection whose documents' entries may join a group
 * (*cp: it, opened; NULL: no).  Catalogs and caches (users, roles, views,
 * keys, sessions) are read by other threads at once: their entries commit
 * alone, as before.  The collection must exist (the command would create
 * one, a catalog change outside any transaction), not be capped (its own
 * lock and eviction) nor time-series, and its changes write no pre-images
 * (their collection may need creating). */
static bool ns_takes_group(const char *ns, sbl_coll_t **cp)
{
    *cp = NULL;
    const char *dot = strchr(ns, '.');
    if (dot == NULL || strncmp(dot + 1, "system.", 7) == 0)
        return false;
    size_t dl = (size_t)(dot - ns);
    if ((dl == 5 && strncmp(ns, "admin", 5) == 0) || (dl == 6 && strncmp(ns, "config", 6) == 0) ||
        (dl == 5 && strncmp(ns, "local", 5) == 0))
        return false;
    sbl_coll_t *c = NULL;
    sbl_err_t err;
    bson_iter_t it;
    sbl_err_clear(&err);
    if (sbl_coll_open(sbl_session_get(), ns, false, &c, NULL, &err) != 0)
        return false;
    const bson_t *o = sbl_coll_options(c);
    if (sbl_coll_capped(c, NULL, NULL) || sbl_coll_dup_ids(c) ||
        (o != NULL && bson_iter_init_find(&it, o, "changeStreamPreAndPostImages"))) {
        sbl_coll_release(c);
        return false;
    }
    *cp = c;
    return true;
}

/* The op and ns of entry (or operation) it's document, whichever come first. */
static void op_and_ns(bson_iter_t *it, const char **opp, const char **nsp)
{
    const char *op = NULL, *ns = NULL;
    while ((op == NULL || ns == NULL) && bson_iter_next(it)) {
        const char *k = bson_iter_key(it);
        if (k[0] == 'o' && k[1] == 'p' && k[2] == '\0' && BSON_ITER_HOLDS_UTF8(it))
            op = bson_iter_utf8(it, NULL);
        else if (k[0] == 'n' && k[1] == 's' && k[2] == '\0' && BSON_ITER_HOLDS_UTF8(it))
            ns = bson_iter_utf8(it, NULL);
    }
    *opp = op;
    *nsp = ns;
}

/* Whether transaction entry e joins a group: a transaction of one entry,
 * not prepared (its o is {applyOps: [...]} alone, what the commit of an
 * unprepared transaction under 16 MB writes), whose operations are all
 * documents' (i, u, d) in collections that take groups.  mongod's applier
 * likewise takes such a transaction apart into its batch; here its
 * operations stay together in the group's transaction, applied at the
 * entry's ts, and its session record waits for the group's commit as a
 * retryable write's does.  Anything else (a prepared or large transaction,
 * a collection created inside one) is applied alone, as before. */
static bool group_takes_txn(const bson_t *e)
{
    bson_iter_t it, o, ops, opi;
    if (!sbl_doc_find_top(e, "o", &it) || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &o) || !bson_iter_next(&o) ||
        strcmp(bson_iter_key(&o), "applyOps") != 0 || !BSON_ITER_HOLDS_ARRAY(&o) ||
        !bson_iter_recurse(&o, &ops) || bson_iter_next(&o))
        return false;
    bool any = false;
    while (bson_iter_next(&ops)) {
        const char *op, *ns;
        sbl_coll_t *c;
        if (!BSON_ITER_HOLDS_DOCUMENT(&ops) || !bson_iter_recurse(&ops, &opi))
            return false;
        op_and_ns(&opi, &op, &ns);
        if (op == NULL || ns == NULL || op[1] != '\0' || strchr("iud", op[0]) == NULL ||
            !ns_takes_group(ns, &c))
            return false;
        sbl_coll_release(c);
        any = true;
    }
    return any;
}

/* The entry sbl_rs_group_takes took as a transaction's (applied by its
 * operations, not as one document's entry). */
static const bson_t *takes_txn;

bool sbl_rs_group_takes(const bson_t *e)
{
    bson_iter_t it;
    takes_drop();
    takes_txn = NULL;
    if (pool.n > 0 || !bson_iter_init(&it, e))
        return false;
    const char *op, *ns;
    op_and_ns(&it, &op, &ns);
    if (op == NULL || ns == NULL || op[1] != '\0' || strchr("iudnc", op[0]) == NULL)
        return false;
    if (op[0] == 'n')
        return true;
    if (op[0] == 'c') {
        if (!group_takes_txn(e))
            return false;
        takes_txn = e;
        return true;
    }
    sbl_coll_t *c;
    if (!ns_takes_group(ns, &c))
        return false;
    takes_coll = c;
    takes_doc = e;
    return true;
}

/* Each entry the group kept: apply it alone (redo) or count it applied. */
static int group_each(bool redo, sbl_err_t *err)
{
    int rc = 0;
    for (size_t off = 0; off < group.len && rc == 0;) {
        uint32_t len;
        bson_t e;
        memcpy(&len, group.buf + off, 4);
        len = BSON_UINT32_FROM_LE(len);
        if (!bson_init_static(&e, group.buf + off, len)) {
            rc = sbl_err_set(err, SBL_E_InternalError, "a grouped oplog entry is damaged");
            break;
        }
        if (!redo || (rc = sbl_rs_apply_entry(&e, err)) == 0)
            sbl_rs_count_applied_op(&e);
        off += len;
    }
    group.n = group.len = group.nsess = 0;
    group.cur = NULL;
    return rc;
}

/* Write noted session k's record from its last entry, at that entry's ts. */
static int group_record_one(sbl_session_t *s, size_t k, sbl_err_t *err)
{
    bson_t e;
    bson_iter_t it;
    uint32_t len, t = 0, i = 0;
    memcpy(&len, group.buf + group.sess_entry[k], 4);
    if (!bson_init_static(&e, group.buf + group.sess_entry[k], BSON_UINT32_FROM_LE(len)) ||
        !sbl_doc_find_top(&e, "ts", &it) || !BSON_ITER_HOLDS_TIMESTAMP(&it))
        return sbl_err_set(err, SBL_E_InternalError, "a grouped oplog entry is damaged");
    bson_iter_timestamp(&it, &t, &i);
    SBL_RET(sbl_txn_set_commit_ts(s, SBL_TS(t, i), err));
    return sbl_txn_record_applied(s, &e, err);
}

/* doc is the entry the open group is applying: when it is a retryable
 * write (i, u, d with lsid and txnNumber) its session is noted (*notedp) and
 * its record waits for the commit.  Any other entry of a noted session
 * (a no-op naming a statement) first has that session's record written, so
 * records keep the entries' order. */
static int group_note_record(sbl_session_t *s, const bson_t *doc, bool *notedp, sbl_err_t *err)
{
    *notedp = false;
    if (!group.open || doc != group.cur) /* the entry's own copy is at group.cur_off */
        return 0;
    bson_iter_t it;
    const uint8_t *lsid = NULL;
    uint32_t lsid_len = 0;
    if (!sbl_doc_find_top(doc, "lsid", &it) || !BSON_ITER_HOLDS_DOCUMENT(&it))
        return 0;
    bson_iter_document(&it, &lsid_len, &lsid);
    bool txn = sbl_doc_find_top(doc, "txnNumber", &it) && BSON_ITER_HOLDS_NUMBER(&it);
    /* a write, or a transaction's commit (the only c entries a group takes) */
    bool write = sbl_doc_find_top(doc, "op", &it) && BSON_ITER_HOLDS_UTF8(&it) &&
                 strchr("iudc", bson_iter_utf8(&it, NULL)[0]) != NULL; /* not n */
    size_t k = 0, lsid_off = group.cur_off + (size_t)(lsid - bson_get_data(doc));
    while (k < group.nsess && (group.sess_lsid_len[k] != lsid_len ||
                               memcmp(group.buf + group.sess_lsid[k], lsid, lsid_len) != 0))
        k++;
    if (!txn || !write) {
        if (k == group.nsess)
            return 0;
        SBL_RET(group_record_one(s, k, err));
        group.nsess--;
        group.sess_entry[k] = group.sess_entry[group.nsess];
        group.sess_lsid[k] = group.sess_lsid[group.nsess];
        group.sess_lsid_len[k] = group.sess_lsid_len[group.nsess];
        return sbl_txn_set_commit_ts(s, group.last_ts, err);
    }
    if (k == GROUP_MAX_SESSIONS)
        return 0; /* written at once, as without groups */
    if (k == group.nsess)
        group.nsess++;
    group.sess_entry[k] = group.cur_off;
    group.sess_lsid[k] = lsid_off;
    group.sess_lsid_len[k] = lsid_len;
    *notedp = true;
    return 0;
}

/* The noted sessions' records, each from its last entry at that entry's ts,
 * in the group's transaction; then the group's newest ts again. */
static int group_write_records(sbl_session_t *s, sbl_err_t *err)
{
    int rc = 0;
    for (size_t k = 0; k < group.nsess && rc == 0; k++)
        rc = group_record_one(s, k, err);
    if (rc == 0 && group.nsess > 0)
        rc = sbl_txn_set_commit_ts(s, group.last_ts, err);
    return rc;
}

static bool group_keep(const bson_t *e)
{
    if (group.len + e->len > group.cap) {
        size_t cap = group.cap ? group.cap : 64 * 1024;
        while (cap < group.len + e->len)
            cap *= 2;
        uint8_t *b = realloc(group.buf, cap);
        if (b == NULL)
            return false;
        group.buf = b;
        group.cap = cap;
    }
    memcpy(group.buf + group.len, bson_get_data(e), e->len);
    group.len += e->len;
    group.n++;
    return true;
}

/* Transaction entry e's operations (group_takes_txn took it) in the open
 * group, at e's ts: the first change's observer writes e in our oplog,
 * else (every operation found done: e replayed) it is written here.  An
 * operation that needs the command path fails the group, which then runs
 * again one entry at a time (e through repl_sync.c's apply_txn_entry). */
static int group_apply_txn(sbl_session_t *s, const bson_t *e, sbl_err_t *err)
{
    bson_iter_t ops;
    if (!sbl_rs_apply_ops_of(e, &ops))
        return sbl_err_set(err, SBL_E_InternalError, "a grouped transaction entry is damaged");
    sbl_repl_applying = e;
    sbl_repl_applied_written = false;
    int rc = 0;
    while (rc == 0 && bson_iter_next(&ops)) {
        bson_t op;
        if (!BSON_ITER_HOLDS_DOCUMENT(&ops) || !sbl_iter_doc(&ops, &op))
            rc = sbl_err_set(err, SBL_E_InternalError, "a grouped transaction entry is damaged");
        else if ((rc = sbl_rs_apply_txn_op(&op, err)) == SBL_RS_NOT_DIRECT)
            rc = sbl_err_set(err, SBL_E_WriteConflict, "a transaction's operation needs the "
                             "command path: the group again, one entry at a time");
    }
    if (rc == 0 && !sbl_repl_applied_written)
        rc = sbl_oplog_append_raw(s, e, err);
    sbl_repl_applying = NULL;
    return rc;
}

static int group_apply(const bson_t *e, sbl_coll_t *c, bool txn, sbl_err_t *err)
{
    sbl_session_t *s = sbl_session_get();
    if (s == NULL)
        return sbl_err_set(err, SBL_E_InternalError, "no storage session");
    if (!group.open) {
        SBL_RET(sbl_txn_begin_outer(s, err));
        group.open = true;
    }
    /* The entry's ts before its change: WiredTiger stamps each update with
     * the commit timestamp current when it is made (the group's previous
     * entry's, else). */
    bson_iter_t it;
    uint32_t t = 0, i = 0;
    uint64_t ts = e == sbl_repl_head.doc ? sbl_repl_head.ts : 0;
    if (ts == 0 && sbl_doc_find_top(e, "ts", &it) && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        bson_iter_timestamp(&it, &t, &i);
        ts = SBL_TS(t, i);
    }
    bool kept = group_keep(e);
    int rc = !kept ? SBL_E_ExceededMemoryLimit
           : SBL_TS_SECS(ts) == 0 ? SBL_E_InvalidBSON
           : sbl_txn_set_commit_ts(s, ts, err);
    if (rc == 0) {
        group.cur = e;
        group.cur_off = group.len - e->len;
        group.last_ts = ts;
        if (txn)
            rc = group_apply_txn(s, e, err);
        else if ((rc = sbl_rs_apply_direct_in(e, c, err)) == SBL_RS_NOT_DIRECT)
            rc = sbl_rs_apply_entry_ahead(e, err); /* any failure: rc */
        group.cur = NULL;
    }
    if (rc == 0 && !sbl_txn_outer_failed(s))
        return group.n >= GROUP_MAX_OPS || group.len >= GROUP_MAX_BYTES
                   ? sbl_rs_group_commit(err) : 0;
    sbl_txn_abort_outer(s);
    group.open = false;
    sbl_err_clear(err);
    if ((rc = group_each(true, err)) == 0 && !kept && (rc = sbl_rs_apply_entry(e, err)) == 0)
        sbl_rs_count_applied_op(e);
    return rc;
}

int sbl_rs_group_apply(const bson_t *e, sbl_err_t *err)
{
    int rc = group_apply(e, e == takes_doc ? takes_coll : NULL, e == takes_txn, err);
    takes_drop();
    takes_txn = NULL;
    return rc;
}

int sbl_rs_group_commit(sbl_err_t *err)
{
    if (!group.open)
        return 0;
    sbl_session_t *s = sbl_session_get();
    if (s != NULL && group_write_records(s, err) != 0) {
        sbl_txn_abort_outer(s);
        s = NULL; /* every entry again, alone */
    }
    group.open = false;
    if (s != NULL && sbl_txn_commit_outer(s, err) == 0) /* it aborts on failure */
        return group_each(false, err);
    sbl_err_clear(err);
    return group_each(true, err);
}

bool sbl_rs_group_open(void)
{
    return group.open;
}
