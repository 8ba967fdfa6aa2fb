/*
 * cursor.c: the registry of server-side cursors and the getMore and
 * killCursors commands.
 *
 * What must stay true:
 *  - A cursor is in the registry or owned by exactly one running command
 *    (in_use), never both unowned and unregistered; its state is freed once,
 *    outside the registry lock.
 *  - A cursor holds no storage cursor or transaction between commands: its
 *    source resumes from its own state (e.g. the last _id) on any thread.
 *  - Ids are random, positive and non-zero; 0 in a reply means "exhausted".
 *  - A document produced but not sent (it did not fit in the 16 MiB batch,
 *    or was read ahead to learn whether the cursor is exhausted) waits in
 *    `pending` and is the first document of the next batch.
 *  - An error met only while reading ahead (the batch was already full) is
 *    not this batch's: it waits in `pending_err` and is the next getMore's
 *    answer, as mongod, which does not read ahead, meets it there.
 *  - A tailable cursor (capped collections) stays registered when its source
 *    runs dry; an empty awaitData getMore parks its request (sbl_op_park,
 *    which the command layer provides) and holds no thread while it waits.
 */
#include "exec/exec.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* The collection of {aggregate: 1}'s cursors ("<db>.$cmd.aggregate"), which
 * getMore and killCursors name though it is not a valid collection name. */
#define AGG_CMD_COLL "$cmd.aggregate"

#define BATCH_MAX_BYTES (16 * 1024 * 1024)
#define FIRST_BATCH_DEFAULT 101
#define NBUCKETS 1024

typedef struct sbl_cursor {
    int64_t id;
    char ns[SBL_NS_MAX];
    sbl_cursor_source_t src;
    void *state;
    bson_t pending;
    bool has_pending;
    sbl_err_t *pending_err; /* met reading ahead: the next getMore's error */
    bool in_use; /* a command is filling a batch from it */
    bool killed; /* killCursors ran while in_use: free when the command is done */
    unsigned flags;         /* SBL_CURSOR_TAILABLE, SBL_CURSOR_AWAIT_DATA */
    int64_t await_until_us; /* an awaitData getMore parked until then (sbl_op_park); 0: none */
    int64_t last_use_us;
    int64_t created_ms, last_use_ms; /* wall clock, for $currentOp's idle cursors */
    int64_t n_docs, n_batches;       /* returned so far */
    bool has_lsid;          /* opened in a logical session: killing it kills the cursor */
    bool in_txn;            /* opened inside a multi-document transaction: it ends with it */
    uint8_t lsid_id[16];
    bool user_bound;         /* opened by an authenticated user: getMore and killCursors of */
    uint8_t owner_uid[32];   /* other users are refused (13), as mongod ties cursors to users */
    uint64_t read_ts;        /* a snapshot read's timestamp: its getMores read there too */
    bool read_majority;      /* read_ts is a majority read's commit point (no atClusterTime) */
    uint64_t open_ts;        /* a router's cursor: the opening command's open_ts */
    struct sbl_cursor *next; /* hash chain */
} sbl_cursor_t;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static sbl_cursor_t *buckets[NBUCKETS];
static int64_t nopen;
/* Registered cursors opened in a transaction (changed under reg_lock): a
 * commit with none to kill, the usual case, skips the walk of the buckets. */
static _Atomic int64_t nopen_txn;

/* Cursors killed while an awaitData getMore waited on them (parked): that
 * getMore, run again at once (sbl_op_unpark_all), answers CursorKilled, as
 * mongod's interrupted one does, not CursorNotFound.  The last few ids. */
#define NKILLED_WAITING 64
static int64_t killed_waiting[NKILLED_WAITING];
static unsigned nkilled_waiting;

/* Under reg_lock: note c's kill when a getMore is parked on it; true then. */
static bool note_killed_waiting(const sbl_cursor_t *c)
{
    if (c->in_use || c->await_until_us == 0)
        return false;
    killed_waiting[nkilled_waiting++ % NKILLED_WAITING] = c->id;
    return true;
}

/* Under reg_lock: whether id was killed under a parked getMore (forgotten then). */
static bool take_killed_waiting(int64_t id)
{
    for (unsigned i = 0; i < NKILLED_WAITING; i++)
        if (killed_waiting[i] == id && id != 0) {
            killed_waiting[i] = 0;
            return true;
        }
    return false;
}

static size_t bucket_of(int64_t id)
{
    return (size_t)((uint64_t)id * 0x9E3779B97F4A7C15ull >> 54) % NBUCKETS;
}

/* Caller holds reg_lock. */
static sbl_cursor_t *find_locked(int64_t id)
{
    for (sbl_cursor_t *c = buckets[bucket_of(id)]; c != NULL; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

/* Caller holds reg_lock. */
static void unlink_locked(sbl_cursor_t *cur)
{
    sbl_cursor_t **pp = &buckets[bucket_of(cur->id)];
    while (*pp != NULL && *pp != cur)
        pp = &(*pp)->next;
    if (*pp == cur) {
        *pp = cur->next;
        nopen--;
        if (cur->in_txn)
            nopen_txn--;
    }
    cur->next = NULL;
}

static int64_t random_id(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
        static uint64_t seq = 0x5ab1e;
        v = (uint64_t)sbl_now_us() * 6364136223846793005ull + ++seq;
    }
    v &= INT64_MAX;
    return v == 0 ? 1 : (int64_t)v;
}

/* Give the cursor an id and put it in the registry. */
static void register_cursor(sbl_cursor_t *cur)
{
    pthread_mutex_lock(&reg_lock);
    do {
        cur->id = random_id();
    } while (find_locked(cur->id) != NULL);
    size_t b = bucket_of(cur->id);
    cur->next = buckets[b];
    buckets[b] = cur;
    cur->in_use = true;
    cur->last_use_us = sbl_now_us();
    cur->last_use_ms = cur->created_ms;
    nopen++;
    if (cur->in_txn)
        nopen_txn++;
    pthread_mutex_unlock(&reg_lock);
}

static void cursor_free(sbl_cursor_t *cur)
{
    if (cur == NULL)
        return;
    if (cur->has_pending)
        bson_destroy(&cur->pending);
    free(cur->pending_err);
    if (cur->src.free != NULL && cur->state != NULL)
        cur->src.free(cur->state);
    free(cur);
}

/* Move src into dst (dst uninitialised); copies when src cannot be stolen (read-only view). */
static void move_doc(bson_t *dst, bson_t *src)
{
    if (!bson_steal(dst, src)) {
        bson_copy_to(src, dst);
        bson_destroy(src);
    }
}

/* The next document for a batch: the pending one if any, else the source's
 * (or the error met reading ahead). */
static int produce(sbl_cursor_t *cur, sbl_opctx_t *ctx, bson_t *doc, bool *donep,
                   sbl_err_t *err)
{
    *donep = false;
    if (cur->pending_err != NULL) {
        int code = cur->pending_err->code;
        if (err != NULL)
            *err = *cur->pending_err;
        free(cur->pending_err);
        cur->pending_err = NULL;
        return code;
    }
    if (cur->has_pending) {
        move_doc(doc, &cur->pending);
        cur->has_pending = false;
        return 0;
    }
    return cur->src.next(cur->state, ctx, doc, donep, err);
}

/*
 * Append up to limit documents (limit < 0: no count limit) to arr, stopping
 * before 16 MiB: the array so far (with each element's type byte and index
 * key, as mongod's bytesUsed()) and the next document; the first always goes
 * in.  Tiny documents' keys added up past maxBsonObjectSize + 16 KiB when
 * only the documents counted.  *donep tells whether the source is exhausted; when the
 * count limit was reached it reads one document ahead to find out.  An error
 * there is kept for the next batch (pending_err) and this one is answered.
 */
static int fill_batch(sbl_cursor_t *cur, sbl_opctx_t *ctx, int64_t limit, bson_t *arr,
                      bool *donep, sbl_err_t *err)
{
    int64_t count = 0;
    size_t bytes = 0;
    bool done = false;
    int rc;

    *donep = false;
    if (cur->src.batch != NULL && !cur->has_pending) { /* the source's batch at once */
        if ((rc = cur->src.batch(cur->state, ctx, limit, BATCH_MAX_BYTES, arr, &count, err)) != 0)
            return rc;
        bytes = arr->len;
        ctx->nreturned = count;
    }
    while (limit < 0 || count < limit) {
        bson_t doc;
        if ((rc = produce(cur, ctx, &doc, &done, err)) != 0)
            return rc;
        if (done)
            break;
        if (count > 0 && bytes + doc.len > BATCH_MAX_BYTES) {
            move_doc(&cur->pending, &doc);
            cur->has_pending = true;
            return 0;
        }
        char key[24];
        const char *k;
        bson_uint32_to_string((uint32_t)count, &k, key, sizeof(key));
        bson_append_document(arr, k, -1, &doc);
        bytes = arr->len;
        bson_destroy(&doc);
        count++;
        ctx->nreturned = count;
    }
    if (!done && limit > 0 && count == limit) {
        bson_t doc;
        sbl_err_t ahead = {0};
        if ((rc = produce(cur, ctx, &doc, &done, &ahead)) != 0) {
            cur->pending_err = malloc(sizeof(*cur->pending_err));
            if (cur->pending_err == NULL) {
                if (err != NULL)
                    *err = ahead;
                return rc;
            }
            *cur->pending_err = ahead;
            cur->pending_err->code = rc;
            return 0;
        }
        if (!done) {
            move_doc(&cur->pending, &doc);
            cur->has_pending = true;
        }
    }
    *donep = done;
    return 0;
}

/* The reply's cursor document is built in place (no copy of the batch):
 * batch_begin opens {cursor: {<batch_key>: [ ... the batch is filled into
 * *arr ..., and batch_end closes it with the id and ns.  On an error after
 * batch_begin the reply keeps a cursor field, which the dispatcher drops. */
static void batch_begin(sbl_opctx_t *ctx, const char *batch_key, bson_t *c, bson_t *arr)
{
    bson_append_document_begin(ctx->reply, "cursor", -1, c);
    bson_append_array_begin(c, batch_key, -1, arr);
    ctx->nreturned = 0;
}

static void batch_end_cur(sbl_opctx_t *ctx, bson_t *c, bson_t *arr, int64_t id, const char *ns,
                          sbl_cursor_t *cur);

static void batch_end(sbl_opctx_t *ctx, bson_t *c, bson_t *arr, int64_t id, const char *ns)
{
    batch_end_cur(ctx, c, arr, id, ns, NULL);
}

static void batch_end_cur(sbl_opctx_t *ctx, bson_t *c, bson_t *arr, int64_t id, const char *ns,
                          sbl_cursor_t *cur)
{
    bson_append_array_end(c, arr);
    if (cur != NULL && cur->src.annotate != NULL && cur->state != NULL)
        cur->src.annotate(cur->state, cur->has_pending, c);
    if (ctx->read_ts != 0 && !ctx->read_majority) /* a snapshot read says where it read */
        bson_append_timestamp(c, "atClusterTime", -1, (uint32_t)(ctx->read_ts >> 32),
                              (uint32_t)ctx->read_ts);
    bson_append_int64(c, "id", -1, id);
    bson_append_utf8(c, "ns", -1, ns, -1);
    bson_append_document_end(ctx->reply, c);
    ctx->cursor_reply = true;
    ctx->cursor_id = id;
}

int sbl_cursor_first_batch(sbl_opctx_t *ctx, const char *ns, const sbl_cursor_source_t *src,
                           void *state, int64_t batch_size, bool single_batch, sbl_err_t *err)
{
    return sbl_cursor_first_batch_flags(ctx, ns, src, state, batch_size, single_batch, 0, err);
}

int sbl_cursor_first_batch_flags(sbl_opctx_t *ctx, const char *ns,
                                 const sbl_cursor_source_t *src, void *state, int64_t batch_size,
                                 bool single_batch, unsigned flags, sbl_err_t *err)
{
    /* bson_t (pending) asks for 128-byte alignment, which calloc does not give. */
    sbl_cursor_t *cur = aligned_alloc(_Alignof(sbl_cursor_t), sizeof(*cur));
    if (cur != NULL)
        memset(cur, 0, sizeof(*cur));
    if (cur == NULL) {
        if (src->free != NULL && state != NULL)
            src->free(state);
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory creating a cursor");
    }
    sbl_strcpy_n(cur->ns, sizeof(cur->ns), ns);
    cur->src = *src;
    cur->state = state;
    cur->flags = flags;
    cur->has_lsid = ctx->has_lsid;
    cur->in_txn = ctx->mtxn != NULL;
    memcpy(cur->lsid_id, ctx->lsid_id, sizeof(cur->lsid_id));
    cur->user_bound = ctx->user_bound;
    memcpy(cur->owner_uid, ctx->user_uid, sizeof(cur->owner_uid));
    cur->read_ts = ctx->read_ts;
    cur->read_majority = ctx->read_majority;
    cur->open_ts = ctx->open_ts;
    cur->created_ms = sbl_now_ms();

    bson_t c, arr;
    bool done = false;
    int rc = 0;
    batch_begin(ctx, "firstBatch", &c, &arr);
    if (batch_size != 0)
        rc = fill_batch(cur, ctx, batch_size < 0 ? FIRST_BATCH_DEFAULT : batch_size, &arr,
                        &done, err);
    cur->n_docs = ctx->nreturned;
    cur->n_batches = 1;
    if (rc != 0) {
        batch_end(ctx, &c, &arr, 0, ns);
        cursor_free(cur);
        return rc;
    }
    int64_t id = 0;
    bool tail = (flags & SBL_CURSOR_TAILABLE) && !(src->finished != NULL && src->finished(state));
    if ((!done || tail) && !single_batch) {
        register_cursor(cur); /* in use until its reply is built (annotate reads it) */
        id = cur->id;
    }
    batch_end_cur(ctx, &c, &arr, id, ns, cur);
    if (id == 0) {
        cursor_free(cur);
        return 0;
    }
    pthread_mutex_lock(&reg_lock);
    bool killed = cur->killed;
    if (killed)
        unlink_locked(cur);
    cur->in_use = false;
    pthread_mutex_unlock(&reg_lock);
    if (killed)
        cursor_free(cur);
    return 0;
}

static uint8_t *put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
    return p + 4;
}

static uint8_t *put_elem(uint8_t *p, uint8_t type, const char *key, size_t klen)
{
    *p++ = type;
    memcpy(p, key, klen + 1);
    return p + klen + 1;
}

/* {cursor: {firstBatch: [doc], id: 0, ns: ns}} written as bytes into the
 * empty reply (what batch_begin/batch_end append, without their appends and
 * the reply's growth step by step): false when the reply is not empty. */
static bool reply_one_bytes(sbl_opctx_t *ctx, const char *ns, const bson_t *doc)
{
    size_t nslen = strlen(ns), dlen = doc != NULL ? doc->len : 0;
    size_t arr = 4 + (doc != NULL ? 3 + dlen : 0) + 1;
    size_t cur = 4 + (1 + 11 + arr) + (1 + 3 + 8) + (1 + 3 + 4 + nslen + 1) + 1;
    size_t total = 4 + 1 + 7 + cur + 1;
    uint8_t *b;
    if (ctx->reply->len != 5 || total > SBL_BSON_MAX_SIZE + 16 * 1024 ||
        (b = bson_reserve_buffer(ctx->reply, (uint32_t)total)) == NULL)
        return false;
    uint8_t *p = put_le32(b, (uint32_t)total);
    p = put_le32(put_elem(p, BSON_TYPE_DOCUMENT, "cursor", 6), (uint32_t)cur);
    p = put_le32(put_elem(p, BSON_TYPE_ARRAY, "firstBatch", 10), (uint32_t)arr);
    if (doc != NULL) {
        p = put_elem(p, BSON_TYPE_DOCUMENT, "0", 1);
        memcpy(p, bson_get_data(doc), dlen);
        p += dlen;
    }
    *p++ = 0; /* the array's end */
    p = put_elem(p, BSON_TYPE_INT64, "id", 2);
    memset(p, 0, 8);
    p = put_le32(put_elem(p + 8, BSON_TYPE_UTF8, "ns", 2), (uint32_t)nslen + 1);
    memcpy(p, ns, nslen + 1);
    p += nslen + 1;
    *p++ = 0; /* the cursor document's end */
    *p++ = 0; /* the reply's end */
    if (p != b + total) { /* cannot happen: the sizes above are the layout */
        bson_reinit(ctx->reply);
        return false;
    }
    return true;
}

void sbl_cursor_reply_one(sbl_opctx_t *ctx, const char *ns, const bson_t *doc)
{
    bson_t c, arr;
    if ((ctx->read_ts == 0 || ctx->read_majority) && reply_one_bytes(ctx, ns, doc)) {
        ctx->nreturned = doc != NULL;
        ctx->cursor_reply = true;
        ctx->cursor_id = 0;
        return;
    }
    batch_begin(ctx, "firstBatch", &c, &arr);
    if (doc != NULL) {
        bson_append_document(&arr, "0", 1, doc);
        ctx->nreturned = 1;
    }
    batch_end(ctx, &c, &arr, 0, ns);
}

/* ---- documents held in memory ------------------------------------------ */

typedef struct docs_state {
    bson_t **docs;
    size_t n, i;
} docs_state_t;

void *sbl_cursor_docs_state(bson_t **docs, size_t n)
{
    docs_state_t *st = calloc(1, sizeof(*st));
    if (st == NULL) {
        for (size_t i = 0; i < n; i++)
            bson_destroy(docs[i]);
        free(docs);
        return NULL;
    }
    st->docs = docs;
    st->n = n;
    return st;
}

static int docs_next(void *state, sbl_opctx_t *ctx, bson_t *doc, bool *donep, sbl_err_t *err)
{
    docs_state_t *st = state;
    if (st == NULL || st->i >= st->n) {
        *donep = true;
        return 0;
    }
    *donep = false;
    move_doc(doc, st->docs[st->i]); /* frees the heap bson_t itself */
    st->docs[st->i++] = NULL;
    return 0;
}

static void docs_free(void *state)
{
    docs_state_t *st = state;
    if (st == NULL)
        return;
    for (size_t i = st->i; i < st->n; i++)
        if (st->docs[i] != NULL)
            bson_destroy(st->docs[i]);
    free(st->docs);
    free(st);
}

const sbl_cursor_source_t sbl_cursor_docs_source = {.next = docs_next, .free = docs_free};

/* ---- reaper -------------------------------------------------------------- */

/* Unlink and free every cursor match() picks.  One in use by a command is
 * left to that command when kill_in_use is false (the reaper), else marked
 * killed so the command frees it when it is done.  Returns how many went. */
static size_t kill_matching(bool (*match)(const sbl_cursor_t *c, const void *arg),
                            const void *arg, bool kill_in_use)
{
    sbl_cursor_t *dead = NULL;
    size_t n = 0;
    bool unpark = false;

    pthread_mutex_lock(&reg_lock);
    for (size_t b = 0; b < NBUCKETS; b++) {
        sbl_cursor_t **pp = &buckets[b];
        while (*pp != NULL) {
            sbl_cursor_t *c = *pp;
            if (match(c, arg) && (!c->in_use || kill_in_use)) {
                n++;
                if (kill_in_use && note_killed_waiting(c))
                    unpark = true;
                if (c->in_use) {
                    c->killed = true;
                    pp = &c->next;
                    continue;
                }
                *pp = c->next;
                nopen--;
                if (c->in_txn)
                    nopen_txn--;
                c->next = dead;
                dead = c;
            } else {
                pp = &c->next;
            }
        }
    }
    pthread_mutex_unlock(&reg_lock);
    if (unpark)
        sbl_op_unpark_all();
    while (dead != NULL) {
        sbl_cursor_t *next = dead->next;
        cursor_free(dead);
        dead = next;
    }
    return n;
}

static bool idle_since(const sbl_cursor_t *c, const void *arg)
{
    return c->last_use_us < *(const int64_t *)arg;
}

void sbl_cursors_reap(int64_t idle_ms)
{
    int64_t cutoff = sbl_now_us() - idle_ms * 1000;
    kill_matching(idle_since, &cutoff, false);
}

static bool in_session(const sbl_cursor_t *c, const void *arg)
{
    return c->has_lsid && memcmp(c->lsid_id, arg, sizeof(c->lsid_id)) == 0;
}

size_t sbl_cursors_kill_session(const uint8_t lsid_id[16])
{
    return kill_matching(in_session, lsid_id, true);
}

static bool in_session_txn(const sbl_cursor_t *c, const void *arg)
{
    return c->in_txn && in_session(c, arg);
}

size_t sbl_cursors_kill_txn(const uint8_t lsid_id[16])
{
    /* The session is checked out: its transaction's cursors were registered
     * before this (checkout and checkin order them), so none counted is none. */
    if (atomic_load(&nopen_txn) == 0)
        return 0;
    return kill_matching(in_session_txn, lsid_id, true);
}

void sbl_cursors_foreach_idle(sbl_cursor_visit_fn fn, void *arg)
{
    pthread_mutex_lock(&reg_lock);
    for (size_t b = 0; b < NBUCKETS; b++)
        for (const sbl_cursor_t *c = buckets[b]; c != NULL; c = c->next) {
            if (c->in_use)
                continue;
            sbl_cursor_info_t info = {
                .id = c->id, .ns = c->ns, .flags = c->flags, .has_lsid = c->has_lsid,
                .lsid_id = c->lsid_id, .in_txn = c->in_txn, .created_ms = c->created_ms,
                .last_use_ms = c->last_use_ms, .n_docs = c->n_docs, .n_batches = c->n_batches};
            fn(&info, arg);
        }
    pthread_mutex_unlock(&reg_lock);
}

int64_t sbl_cursors_open_count(void)
{
    pthread_mutex_lock(&reg_lock);
    int64_t n = nopen;
    pthread_mutex_unlock(&reg_lock);
    return n;
}

/* ---- getMore -------------------------------------------------------------- */

static const char *const getmore_fields[] = {"getMore", "collection", "batchSize", "maxTimeMS",
                                             "term", "lastKnownCommittedOpTime", NULL};

void sbl_cursor_times(int64_t id, uint64_t *read_tsp, bool *majorityp, uint64_t *open_tsp)
{
    pthread_mutex_lock(&reg_lock);
    sbl_cursor_t *c = find_locked(id);
    *read_tsp = c != NULL ? c->read_ts : 0;
    *majorityp = c != NULL && c->read_majority;
    *open_tsp = c != NULL ? c->open_ts : 0;
    pthread_mutex_unlock(&reg_lock);
}

/*
 * A getMore without a batchSize fills up to 16 MiB.  A bson_t grows by doubling and
 * copies what it holds each time, so a full batch was copied about once more on the
 * way (bson_realloc was 11% of the server's CPU in a dump): an empty reply gets the
 * room at once.  Its pages are touched only as the batch fills them; a reply that
 * needs more (tiny documents: their keys add up) still grows as before.  A
 * tailable cursor's getMore (a change stream's: empty or a few events) gets 16
 * KiB: growing from 128 bytes was 10% of the server's CPU with 100 streams of
 * 40-event batches (scripts/changestream-cpu.py: 130 us a getMore, 95 with 16
 * KiB, 105-120 with 64 KiB).
 */
#define REPLY_RESERVE (BATCH_MAX_BYTES + 256 * 1024)
#define TAILABLE_REPLY_RESERVE (16 * 1024)

static void reserve_reply(sbl_opctx_t *ctx, uint32_t size)
{
    if (ctx->reply->len == 5 && bson_reserve_buffer(ctx->reply, size) != NULL)
        bson_reinit(ctx->reply); /* keeps the buffer, empties the document */
}

bool sbl_cursor_get_more_quick(const bson_t *cmd)
{
    bson_iter_t it;
    if (!bson_iter_init(&it, cmd) || !bson_iter_next(&it) || !BSON_ITER_HOLDS_INT64(&it))
        return false;
    pthread_mutex_lock(&reg_lock);
    sbl_cursor_t *cur = find_locked(bson_iter_int64(&it));
    bool quick = cur != NULL && !cur->in_use && cur->src.quick != NULL &&
                 cur->src.quick(cur->state);
    pthread_mutex_unlock(&reg_lock);
    return quick;
}

/* A parked getMore's check when its wake counter moved to gen (sbl_op_idle_fn):
 * whether cursor id's source says the getMore would still find nothing.  A
 * cursor gone, killed, busy or holding a document runs the getMore. */
static bool cursor_idle(int64_t id, uint64_t gen)
{
    pthread_mutex_lock(&reg_lock);
    sbl_cursor_t *cur = find_locked(id);
    bool idle = cur != NULL && !cur->in_use && !cur->killed && !cur->has_pending &&
                cur->pending_err == NULL &&
                cur->src.idle != NULL && cur->src.idle(cur->state, gen);
    if (idle) { /* used, as by the getMore it stands for */
        cur->last_use_us = sbl_now_us();
        cur->last_use_ms = sbl_now_ms();
    }
    pthread_mutex_unlock(&reg_lock);
    return idle;
}

/* An int32 or int64 field value in [0, INT32_MAX] into *vp. */
static bool small_int(const bson_iter_t *it, int64_t *vp)
{
    if (!BSON_ITER_HOLDS_INT32(it) && !BSON_ITER_HOLDS_INT64(it))
        return false;
    *vp = bson_iter_as_int64(it);
    return *vp >= 0 && *vp <= INT32_MAX;
}

/*
 * A getMore that arrives right after its stream's last batch (a change
 * stream's client asks again at once) has nothing to read until the wake
 * point moves: it would run through the dispatcher only to park.  Parked
 * here instead, it runs once, when it wakes.  Only a plain command (the
 * fields a driver's getMore sends, none that could fail) on an idle,
 * awaitData cursor of its namespace whose source waits; everything else,
 * and every error, is left to the getMore.
 */
bool sbl_cursor_park_early(sbl_opctx_t *ctx)
{
    bson_iter_t it;
    int64_t id, await_ms = 1000, v;
    const char *coll = NULL;
    if (ctx->conn == NULL || ctx->req == NULL || !bson_iter_init(&it, ctx->cmd) ||
        !bson_iter_next(&it) || !BSON_ITER_HOLDS_INT64(&it))
        return false;
    id = bson_iter_int64(&it);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        bool known = false; /* by its first byte, then its name */
        if (k[0] == 'c' && strcmp(k, "collection") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            coll = bson_iter_utf8(&it, NULL);
            known = true;
        } else if (k[0] == 'm' && strcmp(k, "maxTimeMS") == 0 && small_int(&it, &v)) {
            await_ms = v;
            known = true;
        } else if (k[0] == '$') {
            known = strcmp(k, "$db") == 0 || strcmp(k, "$clusterTime") == 0 ||
                    strcmp(k, "$readPreference") == 0;
        } else {
            known = (k[0] == 'l' && strcmp(k, "lsid") == 0) ||
                    (k[0] == 'b' && strcmp(k, "batchSize") == 0 && small_int(&it, &v));
        }
        if (!known)
            return false;
    }
    char ns[SBL_NS_MAX];
    if (coll == NULL || sbl_join_dot(ns, sizeof(ns), ctx->db, coll) >= sizeof(ns))
        return false;
    pthread_mutex_lock(&reg_lock);
    sbl_cursor_t *cur = find_locked(id);
    uint64_t gen = 0;
    int64_t now = sbl_now_us();
    bool waits = cur != NULL && !cur->in_use && !cur->killed && !cur->has_pending &&
                 cur->pending_err == NULL &&
                 (cur->flags & SBL_CURSOR_AWAIT_DATA) && cur->src.waits != NULL &&
                 cur->src.wake_gen != NULL && strcmp(cur->ns, ns) == 0 &&
                 cur->src.waits(cur->state, gen = cur->src.wake_gen());
    if (waits) {
        if (cur->await_until_us == 0)
            cur->await_until_us = now + await_ms * 1000;
        waits = now < cur->await_until_us;
    }
    sbl_op_wait_t w = {0};
    if (waits) {
        cur->last_use_us = now;
        cur->last_use_ms = sbl_now_ms();
        w = (sbl_op_wait_t){.genf = cur->src.wake_gen, .duef = cur->src.wake_due_us,
                            .idlef = cur->src.idle != NULL ? cursor_idle : NULL,
                            .idle_arg = id, .gen = gen, .until_us = cur->await_until_us};
    }
    pthread_mutex_unlock(&reg_lock);
    return waits && sbl_op_park(ctx, &w);
}

/* Whether ctx's user may continue or kill cur: a cursor an authenticated
 * user opened is that user's; a cluster member, or a command run without
 * authorization, reaches every cursor. */
static bool may_use(const sbl_cursor_t *cur, const sbl_opctx_t *ctx)
{
    return !cur->user_bound || !ctx->user_bound ||
           memcmp(cur->owner_uid, ctx->user_uid, sizeof(cur->owner_uid)) == 0;
}

int sbl_cursor_get_more(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    int64_t id = 0, batch_size = -1, await_ms = 1000;
    bool max_time = false; /* maxTimeMS given */
    const char *coll = NULL;

    SBL_RET(sbl_check_fields(ctx->cmd, "GetMoreCommandRequest", getmore_fields, err));
    if (!bson_iter_init(&it, ctx->cmd))
        return sbl_err_set(err, SBL_E_InvalidBSON, "invalid command document");
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "getMore") == 0) {
            if (!BSON_ITER_HOLDS_INT64(&it))
                return sbl_type_error(err, "getMore", &it, "long");
            id = bson_iter_int64(&it);
        } else if (strcmp(k, "collection") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return sbl_type_error(err, "collection", &it, "string");
            coll = bson_iter_utf8(&it, NULL);
        } else if (strcmp(k, "batchSize") == 0) {
            SBL_RET(sbl_get_int64(&it, &batch_size, err));
            if (batch_size < 0)
                return sbl_err_set(err, SBL_E_BadValue,
                                   "BatchSize value must be non-negative, but received: %lld",
                                   (long long)batch_size);
            if (batch_size == 0)
                batch_size = -1;
        } else if (strcmp(k, "maxTimeMS") == 0 && BSON_ITER_HOLDS_NUMBER(&it)) {
            await_ms = bson_iter_as_int64(&it); /* an awaitData cursor's wait */
            max_time = true;
        }
    }
    if (coll == NULL)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "BSON field 'getMore.collection' is missing but a required field");
    char ns[SBL_NS_MAX];
    if (sbl_join_dot(ns, sizeof(ns), ctx->db, coll) >= sizeof(ns))
        return sbl_err_set(err, SBL_E_InvalidNamespace, "Fully qualified namespace is too long");
    if (strcmp(coll, AGG_CMD_COLL) != 0) /* {aggregate: 1}'s cursors live there */
        SBL_RET(sbl_validate_ns(ns, err));

    pthread_mutex_lock(&reg_lock);
    sbl_cursor_t *cur = find_locked(id);
    if (cur == NULL) {
        bool killed = take_killed_waiting(id);
        pthread_mutex_unlock(&reg_lock);
        if (killed)
            return sbl_err_set(err, SBL_E_CursorKilled, "cursor id %lld was killed while this "
                               "getMore waited on it", (long long)id);
        return sbl_err_set(err, SBL_E_CursorNotFound, "cursor id %lld not found", (long long)id);
    }
    if (strcmp(cur->ns, ns) != 0) {
        pthread_mutex_unlock(&reg_lock);
        return sbl_err_set(err, SBL_E_Unauthorized,
                           "Requested getMore on namespace '%s', but cursor belongs to a "
                           "different namespace %s",
                           ns, cur->ns);
    }
    if (!may_use(cur, ctx)) {
        pthread_mutex_unlock(&reg_lock);
        return sbl_err_set(err, SBL_E_Unauthorized,
                           "cursor id %lld was not created by the authenticated user",
                           (long long)id);
    }
    if (cur->in_use) {
        pthread_mutex_unlock(&reg_lock);
        return sbl_err_set(err, SBL_E_CursorInUse, "Cursor already in use (namespace: '%s', id: %lld).",
                           ns, (long long)id);
    }
    cur->in_use = true;
    pthread_mutex_unlock(&reg_lock);
    /* before reading: a change after it wakes a parked getMore */
    sbl_op_gen_fn wake_gen = cur->src.wake_gen;
    uint64_t gen = wake_gen != NULL ? wake_gen() : sbl_op_generation();
    if (!(cur->flags & SBL_CURSOR_AWAIT_DATA) && max_time && await_ms > 0) /* a plain time limit */
        ctx->deadline_us = ctx->start_us + await_ms * 1000;

    bson_t c, arr;
    bool done = false;
    if (batch_size < 0)
        reserve_reply(ctx, cur->flags & SBL_CURSOR_TAILABLE ? TAILABLE_REPLY_RESERVE : REPLY_RESERVE);
    batch_begin(ctx, "nextBatch", &c, &arr);
    int rc = fill_batch(cur, ctx, batch_size, &arr, &done, err);

    /* awaitData and nothing new: park the request until an insert or the end of the wait */
    bool tailable = (cur->flags & SBL_CURSOR_TAILABLE) &&
                    !(cur->src.finished != NULL && cur->src.finished(cur->state));
    bool parked = false;
    if (rc == 0 && ctx->nreturned == 0 && (cur->flags & SBL_CURSOR_AWAIT_DATA)) {
        int64_t now = sbl_now_us();
        if (cur->await_until_us == 0)
            cur->await_until_us = now + (await_ms > 0 ? await_ms : 0) * 1000;
        sbl_op_wait_t w = {.genf = wake_gen, .duef = cur->src.wake_due_us,
                           .idlef = cur->src.idle != NULL ? cursor_idle : NULL,
                           .idle_arg = id, .gen = gen, .until_us = cur->await_until_us};
        parked = now < cur->await_until_us && sbl_op_park(ctx, &w);
    }
    if (!parked)
        cur->await_until_us = 0;

    pthread_mutex_lock(&reg_lock);
    bool drop = rc != 0 || (done && !tailable) || cur->killed;
    if (drop)
        unlink_locked(cur);
    else {
        cur->in_use = false;
        cur->last_use_us = sbl_now_us();
        cur->last_use_ms = sbl_now_ms();
        if (!parked) {
            cur->n_docs += ctx->nreturned;
            cur->n_batches++;
        }
    }
    pthread_mutex_unlock(&reg_lock);

    ctx->cursor_awaits = !drop && tailable && (cur->flags & SBL_CURSOR_AWAIT_DATA);
    batch_end_cur(ctx, &c, &arr, drop || rc != 0 ? 0 : id, ns, rc == 0 ? cur : NULL);
    if (drop)
        cursor_free(cur);
    return rc;
}

static bool with_id(const sbl_cursor_t *c, const void *arg)
{
    return c->id == *(const int64_t *)arg;
}

void sbl_cursor_drop(int64_t id)
{
    kill_matching(with_id, &id, true); /* rare (a stream's connection closed): a scan */
}

/* ---- killCursors ------------------------------------------------------------ */

static const char *const kill_fields[] = {"killCursors", "cursors", NULL};

int sbl_cursor_kill(sbl_opctx_t *ctx, sbl_err_t *err)
{
    char ns[SBL_NS_MAX];
    bson_iter_t it, ids;

    SBL_RET(sbl_check_fields(ctx->cmd, "KillCursorsCommandRequest", kill_fields, err));
    if (bson_iter_init(&it, ctx->cmd) && bson_iter_next(&it) && BSON_ITER_HOLDS_UTF8(&it) &&
        strcmp(bson_iter_utf8(&it, NULL), AGG_CMD_COLL) == 0) {
        SBL_RET(sbl_validate_db_name(ctx->db, err));
        sbl_join_dot(ns, sizeof(ns), ctx->db, AGG_CMD_COLL);
    } else {
        SBL_RET(sbl_op_ns(ctx, ns, sizeof(ns), err));
    }
    if (!bson_iter_init_find(&it, ctx->cmd, "cursors"))
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "BSON field 'killCursors.cursors' is missing but a required field");
    if (!BSON_ITER_HOLDS_ARRAY(&it))
        return sbl_type_error(err, "KillCursorsCommandRequest.cursors", &it, "array");
    bson_iter_recurse(&it, &ids);
    while (bson_iter_next(&ids))
        if (!BSON_ITER_HOLDS_INT64(&ids))
            return sbl_type_error(err, "KillCursorsCommandRequest.cursors.0", &ids, "long");

    bson_t killed = BSON_INITIALIZER, not_found = BSON_INITIALIZER;
    uint32_t nk = 0, nnf = 0;
    sbl_cursor_t *dead = NULL;
    bool unpark = false;
    bson_iter_recurse(&it, &ids);
    pthread_mutex_lock(&reg_lock);
    while (bson_iter_next(&ids)) { /* another user's cursor fails the whole command (mongod) */
        sbl_cursor_t *c = find_locked(bson_iter_int64(&ids));
        if (c != NULL && strcmp(c->ns, ns) == 0 && !may_use(c, ctx)) {
            pthread_mutex_unlock(&reg_lock);
            return sbl_err_set(err, SBL_E_Unauthorized,
                               "not authorized to kill cursor %lld on namespace %s",
                               (long long)c->id, ns);
        }
    }
    bson_iter_recurse(&it, &ids);
    while (bson_iter_next(&ids)) {
        int64_t id = bson_iter_int64(&ids);
        sbl_cursor_t *c = find_locked(id);
        char key[16];
        const char *k;
        if (c == NULL || strcmp(c->ns, ns) != 0) {
            bson_uint32_to_string(nnf++, &k, key, sizeof(key));
            bson_append_int64(&not_found, k, -1, id);
            continue;
        }
        if (note_killed_waiting(c))
            unpark = true;
        if (c->in_use) {
            c->killed = true; /* the running getMore frees it */
        } else {
            unlink_locked(c);
            c->next = dead;
            dead = c;
        }
        bson_uint32_to_string(nk++, &k, key, sizeof(key));
        bson_append_int64(&killed, k, -1, id);
    }
    pthread_mutex_unlock(&reg_lock);
    if (unpark)
        sbl_op_unpark_all();
    while (dead != NULL) {
        sbl_cursor_t *next = dead->next;
        cursor_free(dead);
        dead = next;
    }

    bson_t empty = BSON_INITIALIZER;
    bson_append_array(ctx->reply, "cursorsKilled", -1, &killed);
    bson_append_array(ctx->reply, "cursorsNotFound", -1, &not_found);
    bson_append_array(ctx->reply, "cursorsAlive", -1, &empty);
    bson_append_array(ctx->reply, "cursorsUnknown", -1, &empty);
    bson_destroy(&killed);
    bson_destroy(&not_found);
    return 0;
}
