/*
 * rt_cursor.c: reads through the router.  A router cursor holds one remote
 * cursor per targeted shard, each with the batch it last received; a batch
 * for the client takes documents from them in turn, or, for a sorted find,
 * always the smallest head by the sort (a k-way merge of the shards' sorted
 * streams).  skip and limit apply after the merge: each shard is asked for
 * limit + skip documents and none skipped.
 *
 * Ownership: a cursor is in the registry while no request uses it; getMore
 * takes it out, works on it alone, and puts it back or frees it, so a
 * cursor is never used by two requests at once.
 */
#include "router/router_int.h"

#include "doc/doc.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RT_BATCH_BYTES (8 * 1024 * 1024)

typedef struct rcur {
    int shard;
    char *host; /* the member that opened the shard's cursor (getMore and killCursors go
                 * there, as mongos sends them; heap, NULL: unknown) */
    int64_t id;        /* the shard's cursor; 0 when it has no more batches */
    bson_t reply;      /* holds the current batch */
    bool have_reply;
    bson_iter_t it;    /* over the current batch */
    bool have;         /* it is positioned on an unconsumed document */
} rcur_t;

typedef struct rt_cursor {
    int64_t id;
    char db[128], coll[256];
    char owner[384];   /* "db.user" who opened it ("" without authorization) */
    bson_t *sort;      /* NULL: unsorted */
    int64_t limit;     /* documents still to return; -1: no limit */
    int64_t skip;      /* documents still to drop */
    int32_t batch_size; /* asked of the shards on getMore; 0: theirs */
    int n, next;
    int64_t idle_since_ms; /* when it went back into the registry */
    rt_stream_t *stream; /* a change stream's merge (r unused), or NULL */
    struct rt_cursor *link;
    rcur_t r[RT_MAX_SHARDS]; /* last: only the first n are in use (and zeroed) */
} rt_cursor_t;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static rt_cursor_t *reg;

static void cursor_free(rt_cursor_t *c);

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Put c back; cursors idle for 10 minutes are killed (mongos's
 * cursorTimeoutMillis), checked at most once a second. */
static void reg_put(rt_cursor_t *c)
{
    static int64_t last_sweep;
    int64_t now = now_ms();
    rt_cursor_t *expired = NULL;
    pthread_mutex_lock(&reg_lock);
    c->idle_since_ms = now;
    c->link = reg;
    reg = c;
    if (now - last_sweep > 1000) {
        last_sweep = now;
        for (rt_cursor_t **pp = &reg; *pp;) {
            if (now - (*pp)->idle_since_ms > 600000) {
                rt_cursor_t *x = *pp;
                *pp = x->link;
                x->link = expired;
                expired = x;
            } else {
                pp = &(*pp)->link;
            }
        }
    }
    pthread_mutex_unlock(&reg_lock);
    while (expired != NULL) {
        rt_cursor_t *n = expired->link;
        cursor_free(expired);
        expired = n;
    }
}

static rt_cursor_t *reg_take(int64_t id)
{
    pthread_mutex_lock(&reg_lock);
    rt_cursor_t **pp = &reg, *c = NULL;
    for (; *pp; pp = &(*pp)->link)
        if ((*pp)->id == id) {
            c = *pp;
            *pp = c->link;
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    return c;
}

static int64_t new_cursor_id(void)
{
    int64_t id = 0;
    while (id <= 0) {
        uint64_t r = ((uint64_t)rand() << 33) ^ ((uint64_t)rand() << 12) ^ (uint64_t)rand();
        id = (int64_t)(r & 0x7fffffffffffffffULL);
    }
    return id;
}

/* A cursor with room for nr shards' cursors (zeroed: a cursor of every
 * shard zeroes 32 KB, which a scan of a few shards need not pay). */
static rt_cursor_t *cursor_new(const char *db, const char *coll, int nr)
{
    /* it embeds bson_t (128-byte aligned) */
    size_t sz = (sizeof(rt_cursor_t) + 127) & ~(size_t)127;
    rt_cursor_t *c = aligned_alloc(128, sz);
    memset(c, 0, offsetof(rt_cursor_t, r) + (size_t)nr * sizeof(rcur_t));
    c->id = new_cursor_id();
    snprintf(c->db, sizeof(c->db), "%s", db);
    snprintf(c->coll, sizeof(c->coll), "%s", coll);
    rt_auth_owner(c->owner, sizeof(c->owner));
    c->limit = -1;
    return c;
}

void rt_kill_shard_cursor(int shard, const char *host, const char *db, const char *coll,
                          int64_t id)
{
    if (id == 0)
        return;
    bson_t cmd = BSON_INITIALIZER, arr, reply;
    sbl_err_t e = {0};
    BSON_APPEND_UTF8(&cmd, "killCursors", coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "cursors", &arr);
    BSON_APPEND_INT64(&arr, "0", id);
    bson_append_array_end(&cmd, &arr);
    if (rt_run_on(shard, host, db, &cmd, &reply, &e) == 0)
        bson_destroy(&reply);
    bson_destroy(&cmd);
}

/* Kill what the shards still hold and free the cursor. */
static void cursor_free(rt_cursor_t *c)
{
    /* an expired cursor may be freed by another session's command: its
     * killCursors carries no session fields (a transaction's cursors end
     * with it on the shards anyway) */
    bool was = rt_sess_suspend(true);
    for (int i = 0; i < c->n; i++) {
        rcur_t *r = &c->r[i];
        rt_kill_shard_cursor(r->shard, r->host, c->db, c->coll, r->id);
        if (r->have_reply)
            bson_destroy(&r->reply);
        free(r->host);
    }
    rt_sess_suspend(!was);
    rt_stream_free(c->stream);
    if (c->sort)
        bson_destroy(c->sort);
    free(c);
}

/* Take a shard's cursor reply (firstBatch or nextBatch) into r; steals
 * reply.  Called on the thread that received it, right after: a first
 * batch notes the member that answered (rt_answered_by). */
static void rcur_position(rcur_t *r);

static void rcur_take(rcur_t *r, bson_t *reply)
{
    if (r->host == NULL && rt_answered_by(r->shard)[0] != '\0')
        r->host = strdup(rt_answered_by(r->shard));
    if (r->have_reply)
        bson_destroy(&r->reply);
    bson_steal(&r->reply, reply); /* a bson_t is never moved by struct copy */
    bson_init(reply);
    rcur_position(r);
}

/* r's cursor id and iterator, from the reply it now holds. */
static void rcur_position(rcur_t *r)
{
    r->have_reply = true;
    r->have = false;
    r->id = 0;
    bson_iter_t it, cur;
    memset(&r->it, 0, sizeof(r->it));
    if (bson_iter_init_find(&it, &r->reply, "cursor") && bson_iter_recurse(&it, &cur))
        while (bson_iter_next(&cur)) {
            const char *k = bson_iter_key(&cur);
            if (strcmp(k, "id") == 0)
                r->id = bson_iter_as_int64(&cur);
            else if (strcmp(k, "firstBatch") == 0 || strcmp(k, "nextBatch") == 0)
                bson_iter_recurse(&cur, &r->it);
        }
}

/* Position r on its next document; fetch: may ask the shard for a batch.
 * Returns 1 with a document, 0 when exhausted (or not ready without fetch),
 * or -code on an error. */
static int rcur_peek(rt_cursor_t *c, rcur_t *r, bool fetch, sbl_err_t *err)
{
    while (!r->have) {
        if (r->have_reply && r->it.raw != NULL && bson_iter_next(&r->it)) {
            if (BSON_ITER_HOLDS_DOCUMENT(&r->it)) {
                r->have = true;
                break;
            }
            continue;
        }
        if (r->id == 0 || !fetch)
            return 0;
        bson_t cmd = BSON_INITIALIZER, reply;
        BSON_APPEND_INT64(&cmd, "getMore", r->id);
        BSON_APPEND_UTF8(&cmd, "collection", c->coll);
        if (c->batch_size > 0)
            BSON_APPEND_INT32(&cmd, "batchSize", c->batch_size);
        int rc = rt_run_on(r->shard, r->host, c->db, &cmd, &reply, err);
        bson_destroy(&cmd);
        if (rc != 0)
            return -rc;
        int code = rt_reply_code(&reply);
        if (code != 0) {
            bson_iter_t m;
            sbl_err_set(err, code, "%s", bson_iter_init_find(&m, &reply, "errmsg") &&
                                             BSON_ITER_HOLDS_UTF8(&m)
                                         ? bson_iter_utf8(&m, NULL)
                                         : "getMore on a shard failed");
            bson_destroy(&reply);
            r->id = 0;
            return -code;
        }
        rcur_take(r, &reply);
        bson_destroy(&reply);
    }
    return 1;
}

static void rcur_doc(rcur_t *r, bson_t *out)
{
    uint32_t len;
    const uint8_t *data;
    bson_iter_document(&r->it, &len, &data);
    bson_init_static(out, data, len);
}

static int sort_cmp(const bson_t *sort, const bson_t *a, const bson_t *b)
{
    bson_iter_t s, va, vb;
    static const bson_value_t null_v = {.value_type = BSON_TYPE_NULL};
    bson_iter_init(&s, sort);
    while (bson_iter_next(&s)) {
        const char *f = bson_iter_key(&s);
        const bson_value_t *x = sbl_path_get(a, f, &va) ? bson_iter_value(&va) : &null_v;
        const bson_value_t *y = sbl_path_get(b, f, &vb) ? bson_iter_value(&vb) : &null_v;
        int c = sbl_value_compare(x, y);
        if (c != 0)
            return bson_iter_as_int64(&s) < 0 ? -c : c;
    }
    return 0;
}

/* Append up to max documents to arr.  Returns 0 (and *done when no more
 * will come) or an error. */
static int cursor_fill(rt_cursor_t *c, bson_t *arr, int64_t max, bool *done, sbl_err_t *err)
{
    int64_t n = 0;
    uint32_t base = bson_empty(arr) ? 0 : bson_count_keys(arr); /* arr's next index */
    size_t bytes = 0;
    *done = false;
    while (n < max && bytes < RT_BATCH_BYTES && c->limit != 0) {
        int pick = -1;
        if (c->sort != NULL) {
            for (int i = 0; i < c->n; i++) {
                int rc = rcur_peek(c, &c->r[i], true, err);
                if (rc < 0)
                    return -rc;
                if (rc == 0)
                    continue;
                bson_t d, best;
                rcur_doc(&c->r[i], &d);
                if (pick >= 0)
                    rcur_doc(&c->r[pick], &best);
                if (pick < 0 || sort_cmp(c->sort, &d, &best) < 0)
                    pick = i;
            }
        } else {
            /* documents already here first; fetch only when the batch is empty */
            for (int k = 0; k < c->n && pick < 0; k++) {
                int i = (c->next + k) % c->n;
                if (rcur_peek(c, &c->r[i], false, err) == 1)
                    pick = i;
            }
            if (pick < 0 && n > 0) {
                bool more = false;
                for (int i = 0; i < c->n; i++)
                    more |= c->r[i].id != 0;
                if (more)
                    return 0; /* what we have now; the rest on getMore */
            }
            for (int k = 0; k < c->n && pick < 0; k++) {
                int i = (c->next + k) % c->n;
                int rc = rcur_peek(c, &c->r[i], true, err);
                if (rc < 0)
                    return -rc;
                if (rc == 1)
                    pick = i;
            }
            if (pick >= 0)
                c->next = pick;
        }
        if (pick < 0)
            break;
        bson_t d;
        rcur_doc(&c->r[pick], &d);
        c->r[pick].have = false;
        if (c->skip > 0) {
            c->skip--;
            continue;
        }
        char key[16];
        const char *ks;
        bson_uint32_to_string(base + (uint32_t)n, &ks, key, sizeof(key));
        BSON_APPEND_DOCUMENT(arr, ks, &d);
        bytes += d.len;
        n++;
        if (c->limit > 0)
            c->limit--;
    }
    if (c->limit == 0) {
        *done = true;
        return 0;
    }
    bool more = false;
    for (int i = 0; i < c->n && !more; i++) {
        int rc = rcur_peek(c, &c->r[i], false, err);
        more = rc == 1 || c->r[i].id != 0;
    }
    *done = !more;
    return 0;
}

static void append_cursor_reply(bson_t *reply, const char *db, const char *coll, int64_t id,
                                 const bson_t *batch, bool first)
{
    bson_t cur;
    char ns[400];
    snprintf(ns, sizeof(ns), "%s.%s", db, coll);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
    bson_append_array(&cur, first ? "firstBatch" : "nextBatch", -1, batch);
    BSON_APPEND_INT64(&cur, "id", id);
    BSON_APPEND_UTF8(&cur, "ns", ns);
    bson_append_document_end(reply, &cur);
}

/* First batch of a fresh cursor c, into reply; registers or frees c. */
static int cursor_first_batch(rt_cursor_t *c, int64_t batch, bool single, bson_t *reply,
                              sbl_err_t *err)
{
    bson_t arr = BSON_INITIALIZER;
    bool done;
    int rc = cursor_fill(c, &arr, batch, &done, err);
    if (rc != 0) {
        bson_destroy(&arr);
        cursor_free(c);
        return rc;
    }
    if (single)
        done = true;
    append_cursor_reply(reply, c->db, c->coll, done ? 0 : c->id, &arr, true);
    bson_destroy(&arr);
    if (done)
        cursor_free(c);
    else
        reg_put(c);
    return 0;
}

int rt_wrap_cursor_reply(int shard, const char *db, bson_t *shard_reply, bson_t *reply,
                         sbl_err_t *err)
{
    bson_iter_t it, cur;
    int64_t id = 0;
    const char *ns = NULL;
    if (bson_iter_init_find(&it, shard_reply, "cursor") && bson_iter_recurse(&it, &cur))
        while (bson_iter_next(&cur)) {
            if (strcmp(bson_iter_key(&cur), "id") == 0)
                id = bson_iter_as_int64(&cur);
            else if (strcmp(bson_iter_key(&cur), "ns") == 0 && BSON_ITER_HOLDS_UTF8(&cur))
                ns = bson_iter_utf8(&cur, NULL);
        }
    if (id == 0 || ns == NULL) {
        bson_copy_to_excluding_noinit(shard_reply, reply, "$clusterTime", "operationTime",
                                      NULL);
        return 0;
    }
    const char *dot = strchr(ns, '.');
    rt_cursor_t *c = cursor_new(db, dot ? dot + 1 : ns, 1);
    c->n = 1;
    c->r[0].shard = shard;
    bson_t copy;
    bson_copy_to(shard_reply, &copy);
    rcur_take(&c->r[0], &copy);
    bson_destroy(&copy);
    /* The first batch goes back as the shard sent it, under the router's id. */
    bson_t arr = BSON_INITIALIZER;
    uint32_t n = 0;
    while (rcur_peek(c, &c->r[0], false, err) == 1) {
        bson_t d;
        char key[16];
        const char *ks;
        rcur_doc(&c->r[0], &d);
        c->r[0].have = false;
        bson_uint32_to_string(n++, &ks, key, sizeof(key));
        BSON_APPEND_DOCUMENT(&arr, ks, &d);
    }
    bson_t cd;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cd);
    bson_append_array(&cd, "firstBatch", -1, &arr);
    BSON_APPEND_INT64(&cd, "id", c->id);
    BSON_APPEND_UTF8(&cd, "ns", ns);
    bson_append_document_end(reply, &cd);
    bson_destroy(&arr);
    reg_put(c);
    return 0;
}

/* ---- find ---- */

static bool is_stale(const bson_t *reply)
{
    return rt_stale_code(rt_reply_code(reply));
}

int rt_find_opts(const bson_t *cmd, rt_find_opts_t *o, sbl_err_t *err)
{
    bson_iter_t it;
    memset(o, 0, sizeof(*o));
    bson_init(&o->sort);
    o->batch = 101;
    bson_iter_init(&it, cmd);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "sort") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it))
            o->has_sort = sbl_iter_doc(&it, &o->sort) && !bson_empty(&o->sort);
        else if (strcmp(k, "limit") == 0 && BSON_ITER_HOLDS_NUMBER(&it))
            o->limit = bson_iter_as_int64(&it);
        else if (strcmp(k, "skip") == 0 && BSON_ITER_HOLDS_NUMBER(&it))
            o->skip = bson_iter_as_int64(&it);
        else if (strcmp(k, "batchSize") == 0 && BSON_ITER_HOLDS_NUMBER(&it))
            o->batch = bson_iter_as_int64(&it), o->has_batch = true;
        else if (strcmp(k, "singleBatch") == 0)
            o->single = bson_iter_as_bool(&it);
    }
    if (o->limit < 0) {
        o->limit = -o->limit;
        o->single = true;
    }
    if (o->skip < 0 || o->batch < 0)
        return sbl_err_set(err, SBL_E_BadValue, "skip and batchSize must be non-negative");
    if (o->has_sort) {
        bson_iter_init(&it, &o->sort);
        while (bson_iter_next(&it))
            if (!BSON_ITER_HOLDS_NUMBER(&it))
                o->meta_sort = true; /* across shards: as a pipeline (rt_agg.c) */
        o->has_sort = !o->meta_sort;
    }
    return 0;
}

void rt_find_shard_cmd(const bson_t *cmd, const rt_find_opts_t *o, const rt_coll_t *c, int s,
                       bson_t *fwd)
{
    static const char *const strip[] = {"limit", "skip", "batchSize", "singleBatch", NULL};
    bson_init(fwd);
    rt_copy_cmd(cmd, fwd, strip);
    if (o->limit > 0)
        BSON_APPEND_INT64(fwd, "limit", o->limit + o->skip);
    if (o->has_batch)
        BSON_APPEND_INT64(fwd, "batchSize", o->batch + o->skip);
    rt_append_version(fwd, c, s);
}

/* A cursor over the find's options, its nr shards still to be added. */
static rt_cursor_t *find_cursor(const char *db, const char *coll, const rt_find_opts_t *o,
                                int nr)
{
    rt_cursor_t *cur = cursor_new(db, coll, nr);
    cur->limit = o->limit > 0 ? o->limit : -1;
    cur->skip = o->skip;
    cur->sort = o->has_sort ? bson_copy(&o->sort) : NULL;
    cur->batch_size = o->has_batch && o->batch > 0 ? (int32_t)o->batch : 0;
    return cur;
}

/* r reads reply where it lies (a caller's buffer that outlives r's use). */
static void rcur_view(rcur_t *r, const bson_t *reply)
{
    bson_init_static(&r->reply, bson_get_data(reply), reply->len); /* bson_steal refuses it */
    rcur_position(r);
}

/* r's batch becomes its own copy (its position kept). */
static void rcur_own(rcur_t *r)
{
    const uint8_t *old = bson_get_data(&r->reply);
    bson_t copy;
    bson_copy_to(&r->reply, &copy);
    bson_steal(&r->reply, &copy);
    if (r->it.raw != NULL)
        r->it.raw = bson_get_data(&r->reply) + (r->it.raw - old);
}

int rt_find_merge(const char *db, const char *coll, const rt_find_opts_t *o, bson_t *replies,
                  const int *shard, const char *const *hosts, int n, bool borrowed,
                  bson_t *reply, sbl_err_t *err)
{
    rt_cursor_t *cur = find_cursor(db, coll, o, n);
    for (int i = 0; i < n; i++) {
        rcur_t *r = &cur->r[cur->n++];
        r->shard = shard[i];
        if (hosts != NULL && hosts[i] != NULL)
            r->host = strdup(hosts[i]);
        if (borrowed) {
            rcur_view(r, &replies[i]);
        } else {
            rcur_take(r, &replies[i]);
            bson_destroy(&replies[i]);
        }
    }
    /* the batch is built in place, in reply (an error's answer replaces it) */
    bson_t cd, arr;
    bool done;
    char ns[400];
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cd);
    BSON_APPEND_ARRAY_BEGIN(&cd, "firstBatch", &arr);
    int rc = cursor_fill(cur, &arr, o->batch, &done, err);
    bson_append_array_end(&cd, &arr);
    done = done || o->single;
    snprintf(ns, sizeof(ns), "%s.%s", cur->db, cur->coll);
    BSON_APPEND_INT64(&cd, "id", done ? 0 : cur->id);
    BSON_APPEND_UTF8(&cd, "ns", ns);
    bson_append_document_end(reply, &cd);
    if (rc != 0) {
        cursor_free(cur);
        return rc;
    }
    if (done) {
        cursor_free(cur);
        return 0;
    }
    for (int i = 0; borrowed && i < cur->n; i++)
        rcur_own(&cur->r[i]);
    reg_put(cur);
    return 0;
}

int rt_find(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, cmd, "find") || !BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_BadValue, "find needs a collection name");
    const char *coll = bson_iter_utf8(&it, NULL);
    char ns[400];
    snprintf(ns, sizeof(ns), "%s.%s", db, coll);
    bson_t filter = BSON_INITIALIZER;
    if (bson_iter_init_find(&it, cmd, "filter") && BSON_ITER_HOLDS_DOCUMENT(&it))
        sbl_iter_doc(&it, &filter);
    rt_find_opts_t o;
    int rc = rt_find_opts(cmd, &o, err);
    if (rc != 0)
        return rc;
    for (int attempt = 0;; attempt++) {
        rt_coll_t *c = rt_coll_get(ns, attempt > 0, err);
        if (c == NULL)
            return err->code;
        bool targets[RT_MAX_SHARDS];
        int nt = rt_target_read(c, &filter, targets, err);
        if (nt < 0) {
            rt_coll_release(c);
            return err->code;
        }
        if (c->primary == -1 || nt == 1) {
            int s = c->primary;
            for (int i = 0; c->primary != -1 && i < RT_MAX_SHARDS; i++)
                if (targets[i])
                    s = i;
            bson_t fwd = BSON_INITIALIZER, r;
            rt_copy_cmd(cmd, &fwd, NULL);
            if (s >= 0)
                rt_append_version(&fwd, c, s);
            rt_coll_release(c);
            rc = rt_run(s, db, &fwd, &r, err);
            bson_destroy(&fwd);
            if (rc != 0)
                return rc;
            if (is_stale(&r) && attempt < RT_RETRIES) {
                bson_destroy(&r);
                continue;
            }
            if (rt_reply_code(&r) != 0) {
                bson_copy_to_excluding_noinit(&r, reply, "$clusterTime", "operationTime", NULL);
                bson_destroy(&r);
                return 0;
            }
            rc = rt_wrap_cursor_reply(s, db, &r, reply, err);
            bson_destroy(&r);
            return rc;
        }
        if (o.meta_sort) { /* the pipeline's merger sorts by the shards' scores */
            rt_coll_release(c);
            int r = rt_agg_find_by_meta(db, coll, cmd, reply, err);
            if (r >= 0)
                return r;
            o.meta_sort = false; /* an option no pipeline has: merged unsorted */
            continue;
        }
        /* Several shards: ask each for limit + skip documents, merge here. */
        int ntargets = 0;
        for (int s = 0; s < RT_MAX_SHARDS; s++)
            ntargets += targets[s];
        rt_cursor_t *cur = find_cursor(db, coll, &o, ntargets);
        bool stale = false;
        rc = 0;
        /* every shard at once, then their answers in shard order */
        int ns_ = 0, sh[RT_MAX_SHARDS], rcs[RT_MAX_SHARDS];
        bson_t fwds[RT_MAX_SHARDS], rs[RT_MAX_SHARDS];
        const bson_t *cmds[RT_MAX_SHARDS];
        sbl_err_t errs[RT_MAX_SHARDS];
        for (int s = 0; s < RT_MAX_SHARDS; s++) {
            if (!targets[s])
                continue;
            rt_find_shard_cmd(cmd, &o, c, s, &fwds[ns_]);
            cmds[ns_] = &fwds[ns_];
            memset(&errs[ns_], 0, sizeof(errs[ns_]));
            sh[ns_++] = s;
        }
        rt_run_many(ns_, sh, db, cmds, rs, rcs, errs);
        for (int i = 0; i < ns_; i++) {
            bson_destroy(&fwds[i]);
            if (rc == 0 && rcs[i] != 0) {
                rc = rcs[i];
                *err = errs[i];
            } else if (rc == 0 && !stale && is_stale(&rs[i])) {
                stale = true;
            } else if (rc == 0 && !stale && rt_reply_code(&rs[i]) != 0) {
                bson_copy_to_excluding_noinit(&rs[i], reply, "$clusterTime", "operationTime",
                                              NULL);
                rc = -1;
            } else if (rt_reply_code(&rs[i]) == 0) {
                rcur_t *rc_ = &cur->r[cur->n++];
                rc_->shard = sh[i];
                rcur_take(rc_, &rs[i]); /* killed with the cursor when something failed */
            }
            bson_destroy(&rs[i]);
        }
        rt_coll_release(c);
        if (rc != 0 || (stale && attempt >= RT_RETRIES)) {
            cursor_free(cur);
            if (stale && rc == 0)
                return sbl_err_set(err, SBL_E_StaleConfig, "routing for %s kept changing", ns);
            return rc < 0 ? 0 : rc; /* -1: a shard's error reply is the answer */
        }
        if (stale) {
            cursor_free(cur);
            continue;
        }
        return cursor_first_batch(cur, o.batch, o.single, reply, err);
    }
}

/* Whether the client running this command opened c (mongod ties a cursor to
 * its user). */
static bool owned(const rt_cursor_t *c)
{
    char me[384];
    rt_auth_owner(me, sizeof(me));
    return strcmp(me, c->owner) == 0;
}

int rt_get_more(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, cmd, "getMore") || !BSON_ITER_HOLDS_INT64(&it))
        return sbl_err_set(err, SBL_E_TypeMismatch, "getMore's cursor id must be a long");
    int64_t id = bson_iter_int64(&it);
    int64_t batch = INT64_MAX;
    if (bson_iter_init_find(&it, cmd, "batchSize") && BSON_ITER_HOLDS_NUMBER(&it) &&
        bson_iter_as_int64(&it) > 0)
        batch = bson_iter_as_int64(&it);
    rt_cursor_t *c = reg_take(id);
    if (c == NULL)
        return sbl_err_set(err, SBL_E_CursorNotFound, "cursor id %lld not found", (long long)id);
    if (!owned(c)) {
        reg_put(c);
        return sbl_err_set(err, SBL_E_Unauthorized, "cursor id %lld was not created by the "
                           "authenticated user", (long long)id);
    }
    bson_t arr = BSON_INITIALIZER;
    bool done;
    int rc;
    if (c->stream != NULL) {
        rc = rt_stream_more(c->stream, c->id, cmd, reply, &done, err);
    } else if ((rc = cursor_fill(c, &arr, batch, &done, err)) == 0) {
        append_cursor_reply(reply, c->db, c->coll, done ? 0 : c->id, &arr, false);
    }
    bson_destroy(&arr);
    if (rc != 0 || done)
        cursor_free(c);
    else
        reg_put(c);
    return rc;
}

int rt_kill_cursors(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    bson_iter_t it, a;
    bson_t killed = BSON_INITIALIZER, notfound = BSON_INITIALIZER;
    uint32_t nk = 0, nn = 0;
    if (bson_iter_init_find(&it, cmd, "cursors") && bson_iter_recurse(&it, &a))
        while (bson_iter_next(&a)) {
            int64_t id = bson_iter_as_int64(&a);
            rt_cursor_t *c = reg_take(id);
            char key[16];
            const char *ks;
            if (c != NULL && !owned(c)) {
                reg_put(c);
                bson_destroy(&killed);
                bson_destroy(&notfound);
                return sbl_err_set(err, SBL_E_Unauthorized, "not authorized to kill cursor "
                                   "%lld", (long long)id);
            }
            if (c != NULL) {
                cursor_free(c);
                bson_uint32_to_string(nk++, &ks, key, sizeof(key));
                BSON_APPEND_INT64(&killed, ks, id);
            } else {
                bson_uint32_to_string(nn++, &ks, key, sizeof(key));
                BSON_APPEND_INT64(&notfound, ks, id);
            }
        }
    bson_t empty = BSON_INITIALIZER;
    bson_append_array(reply, "cursorsKilled", -1, &killed);
    bson_append_array(reply, "cursorsNotFound", -1, &notfound);
    bson_append_array(reply, "cursorsAlive", -1, &empty);
    bson_append_array(reply, "cursorsUnknown", -1, &empty);
    bson_destroy(&killed);
    bson_destroy(&notfound);
    return 0;
}

int rt_merge_cursors(const char *db, const char *coll, bson_t *replies, const int *shard_of,
                     int n, const bson_t *sort, int64_t limit, int64_t skip, bson_t *reply,
                     sbl_err_t *err)
{
    rt_cursor_t *c = cursor_new(db, coll, n);
    c->sort = sort ? bson_copy(sort) : NULL;
    c->limit = limit;
    c->skip = skip;
    for (int i = 0; i < n; i++) {
        c->r[c->n].shard = shard_of[i];
        rcur_take(&c->r[c->n++], &replies[i]);
        bson_destroy(&replies[i]);
    }
    return cursor_first_batch(c, 101, false, reply, err);
}

int rt_docs_cursor(const char *db, const char *coll, const bson_t *docs, int64_t batch,
                   bson_t *reply, sbl_err_t *err)
{
    /* one exhausted "shard" (id 0) whose only batch holds every document */
    rt_cursor_t *c = cursor_new(db, coll, 1);
    bson_t wrap = BSON_INITIALIZER, cur;
    BSON_APPEND_DOCUMENT_BEGIN(&wrap, "cursor", &cur);
    BSON_APPEND_INT64(&cur, "id", 0);
    bson_append_array(&cur, "firstBatch", -1, docs);
    bson_append_document_end(&wrap, &cur);
    c->n = 1;
    c->r[0].shard = -1;
    rcur_take(&c->r[0], &wrap);
    bson_destroy(&wrap);
    return cursor_first_batch(c, batch, false, reply, err);
}

int64_t rt_stream_register(rt_stream_t *s, const char *db, const char *coll)
{
    rt_cursor_t *c = cursor_new(db, coll, 0);
    c->stream = s;
    int64_t id = c->id;
    reg_put(c);
    return id;
}

int rt_drain_cursor(bson_t *shard_reply, const char *db, const char *coll, int shard,
                    bson_t *arr, sbl_err_t *err)
{
    rt_cursor_t *c = cursor_new(db, coll, 1);
    c->n = 1;
    c->r[0].shard = shard;
    bson_t copy;
    bson_copy_to(shard_reply, &copy);
    rcur_take(&c->r[0], &copy);
    bson_destroy(&copy);
    bool done = false;
    int rc = 0;
    while (rc == 0 && !done)
        rc = cursor_fill(c, arr, INT64_MAX, &done, err);
    cursor_free(c);
    return rc;
}

void rt_cursors_shutdown(void)
{
    pthread_mutex_lock(&reg_lock);
    rt_cursor_t *c = reg;
    reg = NULL;
    pthread_mutex_unlock(&reg_lock);
    while (c != NULL) {
        rt_cursor_t *n = c->link;
        cursor_free(c);
        c = n;
    }
}
