/*
 * rt_stream.c: change streams through the router, merged as mongos merges
 * them.  $changeStream is opened on every shard (a collection's, a
 * database's or the whole deployment's stream: any shard may hold its
 * data); each shard's cursor gives events in its own oplog order with their
 * resume tokens (whose hex strings compare in clusterTime order, the same
 * format mongos hands out) and, with every batch, a postBatchResumeToken:
 * the shard's promise that no event before it is still to come.
 *
 * What must stay true: an event goes to the client only when it is the
 * smallest token buffered and every other shard has either buffered an
 * event after it or promised (postBatchResumeToken) to be past it, so the
 * client sees the shards' events in one order and a resume token from the
 * router resumes every shard at the right place.  A shard with no writes
 * would never move its promise: the router then sends it a read with
 * readConcern {afterClusterTime} just past the waiting event, which makes a
 * primary write a no-op to get there (mongod's shards advance the same way,
 * with a periodic no-op and gossiped cluster times).
 */
#include "router/router_int.h"

#include "doc/doc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RT_STREAM_ROUND_MS 100 /* a shard's await in one getMore round */

typedef struct cs_remote {
    int shard;
    int64_t id;   /* the shard's cursor; 0 when closed */
    bson_t **q;   /* buffered events, in order */
    size_t qn, qi, cap;
    char *pbrt;   /* its latest postBatchResumeToken._data */
    char *asked;  /* the token it was last asked to advance past */
    char host[RT_HOST_MAX]; /* the member that opened the cursor: its getMore goes there */
} cs_remote_t;

struct rt_stream {
    char db[128], coll[256];
    int n;
    cs_remote_t r[RT_MAX_SHARDS];
    char *pbrt; /* the postBatchResumeToken the client last got */
    bool invalidated; /* an invalidate event was sent: the stream is over */
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *token_of(const bson_t *doc, const char *path)
{
    bson_iter_t it, d;
    if (bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, path, &d) &&
        BSON_ITER_HOLDS_UTF8(&d))
        return bson_iter_utf8(&d, NULL);
    return NULL;
}

static void set_str(char **p, const char *s)
{
    char *n = s != NULL ? bson_strdup(s) : NULL;
    bson_free(*p);
    *p = n;
}

/* Take a shard's cursor reply (firstBatch or nextBatch) into r. */
static void remote_take(cs_remote_t *r, const bson_t *reply)
{
    bson_iter_t it, cur, b;
    r->id = 0;
    if (!bson_iter_init_find(&it, reply, "cursor") || !bson_iter_recurse(&it, &cur))
        return;
    while (bson_iter_next(&cur)) {
        const char *k = bson_iter_key(&cur);
        if (strcmp(k, "id") == 0) {
            r->id = bson_iter_as_int64(&cur);
        } else if (strcmp(k, "postBatchResumeToken") == 0 && BSON_ITER_HOLDS_DOCUMENT(&cur)) {
            bson_t t;
            sbl_iter_doc(&cur, &t);
            set_str(&r->pbrt, token_of(&t, "_data"));
        } else if ((strcmp(k, "firstBatch") == 0 || strcmp(k, "nextBatch") == 0) &&
                   bson_iter_recurse(&cur, &b)) {
            if (r->qi == r->qn)
                r->qi = r->qn = 0;
            while (bson_iter_next(&b)) {
                bson_t d;
                if (!sbl_iter_doc(&b, &d))
                    continue;
                if (r->qn == r->cap) {
                    size_t cap = r->cap ? r->cap * 2 : 16;
                    bson_t **q = realloc(r->q, cap * sizeof(*q));
                    if (q == NULL)
                        break;
                    r->q = q;
                    r->cap = cap;
                }
                r->q[r->qn++] = bson_copy(&d);
            }
        }
    }
}

static const char *head_token(const cs_remote_t *r)
{
    return r->qi < r->qn ? token_of(r->q[r->qi], "_id._data") : NULL;
}

/* Whether remote r can hold back nothing older than tok: it has an event
 * buffered at or after tok, promised to be past it, or is closed. */
static bool promised(const cs_remote_t *r, const char *tok)
{
    const char *h = head_token(r);
    if (h != NULL)
        return strcmp(h, tok) >= 0;
    if (r->id == 0)
        return true;
    return r->pbrt != NULL && strcmp(r->pbrt, tok) > 0;
}

/* The remote whose head event is the next to send (-1: none buffered);
 * *ready: every other remote promised to be past it. */
static int next_remote(const rt_stream_t *s, bool *ready)
{
    int best = -1;
    const char *bt = NULL;
    for (int i = 0; i < s->n; i++) {
        const char *h = head_token(&s->r[i]);
        if (h != NULL && (bt == NULL || strcmp(h, bt) < 0)) {
            best = i;
            bt = h;
        }
    }
    *ready = best >= 0;
    for (int i = 0; best >= 0 && i < s->n && *ready; i++)
        if (i != best && !promised(&s->r[i], bt))
            *ready = false;
    return best;
}

/* Make the shards that hold event tok back (no event buffered, promise
 * before it) move past its clusterTime: a read after that time makes a
 * primary write a no-op there. */
static void advance_lagging(rt_stream_t *s, const bson_t *ev, const char *tok)
{
    bson_iter_t it;
    uint32_t t = 0, inc = 0;
    if (!bson_iter_init_find(&it, ev, "clusterTime") || !BSON_ITER_HOLDS_TIMESTAMP(&it))
        return;
    bson_iter_timestamp(&it, &t, &inc);
    int sh[RT_MAX_SHARDS], rcs[RT_MAX_SHARDS], n = 0;
    bson_t cmd = BSON_INITIALIZER, f, in, rc, rs[RT_MAX_SHARDS];
    const bson_t *cmds[RT_MAX_SHARDS];
    sbl_err_t errs[RT_MAX_SHARDS];
    BSON_APPEND_UTF8(&cmd, "find", "system.sable.clock"); /* matches nothing */
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &f);
    BSON_APPEND_DOCUMENT_BEGIN(&f, "_id", &in);
    BSON_APPEND_BOOL(&in, "$exists", false);
    bson_append_document_end(&f, &in);
    bson_append_document_end(&cmd, &f);
    BSON_APPEND_INT32(&cmd, "limit", 1);
    BSON_APPEND_BOOL(&cmd, "singleBatch", true);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "readConcern", &rc);
    BSON_APPEND_TIMESTAMP(&rc, "afterClusterTime", t, inc + 1);
    bson_append_document_end(&cmd, &rc);
    for (int i = 0; i < s->n; i++) {
        cs_remote_t *r = &s->r[i];
        if (promised(r, tok) || (r->asked != NULL && strcmp(r->asked, tok) >= 0))
            continue;
        set_str(&r->asked, tok);
        sh[n] = r->shard;
        cmds[n] = &cmd;
        memset(&errs[n], 0, sizeof(errs[n]));
        n++;
    }
    if (n > 0) {
        rt_run_many(n, sh, "config", cmds, rs, rcs, errs);
        for (int i = 0; i < n; i++)
            bson_destroy(&rs[i]);
    }
    bson_destroy(&cmd);
}

/* One getMore on every open remote with nothing buffered, in parallel,
 * each waiting up to await_ms for events.  Returns 0 or an error (a
 * shard's error reply copied into *errreply, then -1). */
static int more_round(rt_stream_t *s, int64_t await_ms, bson_t *errreply, sbl_err_t *err)
{
    int sh[RT_MAX_SHARDS], idx[RT_MAX_SHARDS], rcs[RT_MAX_SHARDS], n = 0, rc = 0;
    const char *on[RT_MAX_SHARDS];
    bson_t cmds_[RT_MAX_SHARDS], rs[RT_MAX_SHARDS];
    const bson_t *cmds[RT_MAX_SHARDS];
    sbl_err_t errs[RT_MAX_SHARDS];
    for (int i = 0; i < s->n; i++) {
        cs_remote_t *r = &s->r[i];
        if (r->id == 0 || r->qi < r->qn)
            continue;
        bson_init(&cmds_[n]);
        BSON_APPEND_INT64(&cmds_[n], "getMore", r->id);
        BSON_APPEND_UTF8(&cmds_[n], "collection", s->coll[0] ? s->coll : "$cmd.aggregate");
        BSON_APPEND_INT64(&cmds_[n], "maxTimeMS", await_ms > 0 ? await_ms : 1);
        cmds[n] = &cmds_[n];
        memset(&errs[n], 0, sizeof(errs[n]));
        sh[n] = r->shard;
        on[n] = r->host;
        idx[n++] = i;
    }
    if (n == 0)
        return 0;
    rt_run_many_on(n, sh, on, s->db, cmds, rs, rcs, errs);
    for (int i = 0; i < n; i++) {
        cs_remote_t *r = &s->r[idx[i]];
        if (rc == 0 && rcs[i] != 0) {
            *err = errs[i];
            rc = rcs[i];
        } else if (rc == 0 && rt_reply_code(&rs[i]) != 0) {
            bson_copy_to_excluding_noinit(&rs[i], errreply, "$clusterTime", "operationTime",
                                          NULL);
            rc = -1;
        } else if (rcs[i] == 0) {
            remote_take(r, &rs[i]);
        }
        if (rcs[i] != 0 || rt_reply_code(&rs[i]) != 0)
            r->id = 0; /* the shard's cursor is gone */
        bson_destroy(&cmds_[i]);
        bson_destroy(&rs[i]);
    }
    return rc;
}

/* The client's postBatchResumeToken: the last event sent while events wait
 * in the buffers, else the least promise of the open shards (never moving
 * back). */
static void update_pbrt(rt_stream_t *s)
{
    const char *low = NULL;
    for (int i = 0; i < s->n; i++) {
        const cs_remote_t *r = &s->r[i];
        if (r->qi < r->qn)
            return;
        if (r->id != 0 && r->pbrt != NULL && (low == NULL || strcmp(r->pbrt, low) < 0))
            low = r->pbrt;
    }
    if (low != NULL && (s->pbrt == NULL || strcmp(low, s->pbrt) > 0))
        set_str(&s->pbrt, low);
}

/* Up to max events into arr, waiting up to await_ms for the first; ask:
 * ask the shards at least once (a getMore; not for the first batch, which
 * takes only what the shards' first batches hold).  Returns 0, -1 with a
 * shard's error reply in errreply, or an error. */
static int stream_fill(rt_stream_t *s, bson_t *arr, int64_t max, int64_t await_ms, bool ask,
                       bson_t *errreply, sbl_err_t *err)
{
    int64_t deadline = now_ms() + await_ms;
    uint32_t n = 0;
    for (int round = 0;; round++) {
        bool ready = false;
        int i = -1;
        while ((int64_t)n < max && (i = next_remote(s, &ready)) >= 0 && ready) {
            cs_remote_t *r = &s->r[i];
            bson_t *ev = r->q[r->qi++];
            char key[16];
            const char *ks;
            bson_uint32_to_string(n++, &ks, key, sizeof(key));
            BSON_APPEND_DOCUMENT(arr, ks, ev);
            set_str(&s->pbrt, token_of(ev, "_id._data"));
            /* the first shard's invalidate ends the stream (mongos sends one
             * drop and one invalidate, not one per shard) */
            const char *op = sbl_doc_utf8(ev, "operationType");
            s->invalidated = op != NULL && strcmp(op, "invalidate") == 0;
            bson_destroy(ev);
            if (s->invalidated)
                return 0;
        }
        int64_t left = deadline - now_ms();
        if (n > 0 || (int64_t)n >= max || (left <= 0 && (round > 0 || !ask)))
            break;
        if (i >= 0) /* an event waits for the other shards' promises */
            advance_lagging(s, s->r[i].q[s->r[i].qi], head_token(&s->r[i]));
        int rc = more_round(s, left < RT_STREAM_ROUND_MS ? left : RT_STREAM_ROUND_MS, errreply,
                            err);
        if (rc != 0)
            return rc;
        bool open = false;
        for (int k = 0; k < s->n; k++)
            open |= s->r[k].id != 0 || s->r[k].qi < s->r[k].qn;
        if (!open)
            break;
    }
    update_pbrt(s);
    return 0;
}

static bool stream_open(const rt_stream_t *s)
{
    if (s->invalidated)
        return false;
    for (int i = 0; i < s->n; i++)
        if (s->r[i].id != 0 || s->r[i].qi < s->r[i].qn)
            return true;
    return false;
}

static void append_batch(rt_stream_t *s, bson_t *reply, int64_t id, const bson_t *arr,
                         bool first)
{
    bson_t cur, t;
    char ns[400];
    snprintf(ns, sizeof(ns), "%s.%s", s->db, s->coll[0] ? s->coll : "$cmd.aggregate");
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
    bson_append_array(&cur, first ? "firstBatch" : "nextBatch", -1, arr);
    if (s->pbrt != NULL) {
        BSON_APPEND_DOCUMENT_BEGIN(&cur, "postBatchResumeToken", &t);
        BSON_APPEND_UTF8(&t, "_data", s->pbrt);
        bson_append_document_end(&cur, &t);
    }
    BSON_APPEND_INT64(&cur, "id", id);
    BSON_APPEND_UTF8(&cur, "ns", ns);
    bson_append_document_end(reply, &cur);
}

void rt_stream_free(rt_stream_t *s)
{
    if (s == NULL)
        return;
    for (int i = 0; i < s->n; i++) {
        cs_remote_t *r = &s->r[i];
        if (r->id != 0) {
            bson_t cmd = BSON_INITIALIZER, a, reply;
            sbl_err_t e = {0};
            BSON_APPEND_UTF8(&cmd, "killCursors", s->coll[0] ? s->coll : "$cmd.aggregate");
            BSON_APPEND_ARRAY_BEGIN(&cmd, "cursors", &a);
            BSON_APPEND_INT64(&a, "0", r->id);
            bson_append_array_end(&cmd, &a);
            if (rt_run_on(r->shard, r->host, s->db, &cmd, &reply, &e) == 0)
                bson_destroy(&reply);
            bson_destroy(&cmd);
        }
        for (size_t k = r->qi; k < r->qn; k++)
            bson_destroy(r->q[k]);
        free(r->q);
        bson_free(r->pbrt);
        bson_free(r->asked);
    }
    bson_free(s->pbrt);
    free(s);
}

int rt_stream_more(rt_stream_t *s, int64_t id, const bson_t *cmd, bson_t *reply, bool *donep,
                   sbl_err_t *err)
{
    bson_iter_t it;
    int64_t max = INT64_MAX, await_ms = 1000;
    if (bson_iter_init_find(&it, cmd, "batchSize") && BSON_ITER_HOLDS_NUMBER(&it) &&
        bson_iter_as_int64(&it) > 0)
        max = bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, cmd, "maxTimeMS") && BSON_ITER_HOLDS_NUMBER(&it) &&
        bson_iter_as_int64(&it) >= 0)
        await_ms = bson_iter_as_int64(&it);
    bson_t arr = BSON_INITIALIZER;
    int rc = stream_fill(s, &arr, max, await_ms, true, reply, err);
    *donep = rc != 0 || !stream_open(s);
    if (rc == 0)
        append_batch(s, reply, *donep ? 0 : id, &arr, false);
    bson_destroy(&arr);
    return rc < 0 ? 0 : rc;
}

int rt_change_stream(const char *db, const char *coll, const bson_t *cmd, bson_t *reply,
                     sbl_err_t *err)
{
    int n = rt_shard_count();
    if (n == 0)
        return sbl_err_set(err, SBL_E_ShardNotFound, "no shards");
    rt_stream_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    snprintf(s->db, sizeof(s->db), "%s", db);
    snprintf(s->coll, sizeof(s->coll), "%s", coll != NULL ? coll : "");
    int sh[RT_MAX_SHARDS], rcs[RT_MAX_SHARDS], rc = 0;
    bson_t fwd = BSON_INITIALIZER, rs[RT_MAX_SHARDS];
    const bson_t *cmds[RT_MAX_SHARDS];
    sbl_err_t errs[RT_MAX_SHARDS];
    rt_copy_cmd(cmd, &fwd, NULL);
    int m = 0; /* the shards not removed (removeShard) */
    for (int i = 0; i < n; i++)
        if (!rt_shard_removed(i)) {
            sh[m] = i;
            cmds[m] = &fwd;
            memset(&errs[m++], 0, sizeof(errs[0]));
        }
    rt_run_many(m, sh, db, cmds, rs, rcs, errs);
    bson_destroy(&fwd);
    for (int k = 0; k < m; k++) {
        int i = sh[k];
        cs_remote_t *r = &s->r[s->n];
        if (rc == 0 && rcs[k] != 0) {
            *err = errs[k];
            rc = rcs[k];
        } else if (rc == 0 && rt_reply_code(&rs[k]) != 0) {
            bson_copy_to_excluding_noinit(&rs[k], reply, "$clusterTime", "operationTime", NULL);
            rc = -1;
        } else if (rcs[k] == 0 && rt_reply_code(&rs[k]) == 0) {
            r->shard = i;
            snprintf(r->host, sizeof(r->host), "%s", rt_answered_by(i));
            remote_take(r, &rs[k]);
            s->n++;
        }
        bson_destroy(&rs[k]);
    }
    if (rc != 0) {
        rt_stream_free(s); /* kills the cursors the other shards opened */
        return rc < 0 ? 0 : rc;
    }
    bson_t arr = BSON_INITIALIZER;
    int64_t max = 101;
    bson_iter_t it, b;
    if (bson_iter_init(&it, cmd) && bson_iter_find_descendant(&it, "cursor.batchSize", &b) &&
        BSON_ITER_HOLDS_NUMBER(&b))
        max = bson_iter_as_int64(&b);
    rc = stream_fill(s, &arr, max, 0, false, reply, err);
    if (rc == 0 && stream_open(s)) {
        int64_t id = rt_stream_register(s, db, coll != NULL ? coll : "$cmd.aggregate");
        append_batch(s, reply, id, &arr, true);
    } else {
        if (rc == 0)
            append_batch(s, reply, 0, &arr, true);
        rt_stream_free(s);
    }
    bson_destroy(&arr);
    return rc < 0 ? 0 : rc;
}
