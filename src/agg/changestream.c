/*
 * changestream.c: the $changeStream stage.  An aggregate whose first stage
 * is $changeStream opens a tailable, awaitData cursor whose source reads
 * local.oplog.rs (keyed by ts) from its resume point, turns each entry of
 * the watched collection, database or deployment into mongod 7.0's change
 * events, runs the pipeline's later stages on each event and hands them to
 * the cursor layer; each batch carries postBatchResumeToken.
 *
 * What must stay true:
 *  - Only entries at or below the majority commit point are read
 *    (sbl_repl_majority_ts), so an event is never one a rollback undoes.
 *  - Events come out in (clusterTime, txnOpIndex, fromInvalidate) order and
 *    each exactly once: the source remembers the last oplog ts it consumed
 *    and resumes strictly after it; a resume token skips every event at or
 *    before its position.
 *  - postBatchResumeToken never passes an event the client has not been
 *    sent (a document held back for the next batch included).
 *  - The oplog the stream needs is still there: a resume point older than
 *    the oldest entry, or a consumed entry that has since been deleted,
 *    fails with ChangeStreamHistoryLost (286).
 */
#include "agg/cs_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "repl/repl.h"

#define REFILL_ENTRIES 1000 /* oplog entries read per refill */

typedef enum { CS_COLL, CS_DB, CS_CLUSTER } cs_scope_t;
typedef enum { FD_DEFAULT, FD_LOOKUP, FD_WHEN_AVAILABLE, FD_REQUIRED } cs_fd_t;
typedef enum { PRE_OFF, PRE_WHEN_AVAILABLE, PRE_REQUIRED } cs_pre_t;

typedef struct cs_item {
    bson_t *doc;
    char *token; /* the event's _data (PBRT) */
} cs_item_t;

typedef struct cs_state {
    cs_scope_t scope;
    char db[SBL_NS_MAX];
    char coll[SBL_NS_MAX];
    char cursor_ns[SBL_NS_MAX];
    cs_fd_t full_doc;
    cs_pre_t pre;
    bool expanded; /* showExpandedEvents */
    bson_t *rest;  /* the stages after $changeStream (an array), or NULL */
    sbl_cs_pos_t skip; /* events at or before it are not returned */
    bool has_skip;
    uint64_t scanned;  /* the last oplog ts consumed (0: none yet) */
    uint64_t next_lo;  /* the first ts to read */
    bool invalidated;  /* an invalidate is queued: read no further */
    cs_item_t *q;
    size_t qn, qi, qcap;
    char *tok_last;    /* the last event produced */
    char *tok_prev;    /* the one before it */
    char *tok_hwm;     /* the start point, then the latest high-water mark sent */
} cs_state_t;

static char *token_str(const bson_t *tok)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, tok, "_data") && BSON_ITER_HOLDS_UTF8(&it)
               ? bson_strdup(bson_iter_utf8(&it, NULL)) : bson_strdup("");
}

static void set_str(char **dst, char *src)
{
    bson_free(*dst);
    *dst = src;
}

static char *hwm_token(uint64_t ts)
{
    bson_t t = BSON_INITIALIZER;
    sbl_cs_pos_t p = {.ts = ts};
    sbl_cs_token_make(&p, NULL, NULL, &t);
    char *s = token_str(&t);
    bson_destroy(&t);
    return s;
}

static void cs_free(void *state)
{
    cs_state_t *st = state;
    if (st == NULL)
        return;
    for (size_t i = st->qi; i < st->qn; i++) {
        bson_destroy(st->q[i].doc);
        bson_free(st->q[i].token);
    }
    bson_free(st->q);
    if (st->rest != NULL)
        bson_destroy(st->rest);
    bson_free(st->tok_last);
    bson_free(st->tok_prev);
    bson_free(st->tok_hwm);
    free(st);
}

static void queue_push(cs_state_t *st, bson_t *doc, char *token)
{
    if (st->qi > 0 && st->qi == st->qn)
        st->qi = st->qn = 0;
    if (st->qn == st->qcap) {
        st->qcap = st->qcap ? 2 * st->qcap : 16;
        st->q = bson_realloc(st->q, st->qcap * sizeof(*st->q));
    }
    st->q[st->qn].doc = doc;
    st->q[st->qn++].token = token;
}

/* ---- building events ------------------------------------------------------------ */

static void split_ns(const char *ns, char *db, size_t dbn, const char **coll)
{
    const char *dot = strchr(ns, '.');
    size_t n = dot != NULL ? (size_t)(dot - ns) : strlen(ns);
    if (n >= dbn)
        n = dbn - 1;
    memcpy(db, ns, n);
    db[n] = '\0';
    *coll = dot != NULL ? dot + 1 : "";
}

static void append_ns(bson_t *ev, const char *key, const char *db, const char *coll)
{
    bson_t n;
    bson_append_document_begin(ev, key, -1, &n);
    BSON_APPEND_UTF8(&n, "db", db);
    if (coll != NULL)
        BSON_APPEND_UTF8(&n, "coll", coll);
    bson_append_document_end(ev, &n);
}

/* What one oplog entry (or one operation of an applyOps) says. */
typedef struct cs_entry {
    char op;
    const char *ns;
    const uint8_t *uuid;
    bson_t o, o2, diff;
    bool has_o, has_o2, has_diff;
    uint64_t ts;
    int64_t wall;
    const bson_iter_t *lsid; /* a transaction's */
    int64_t txn_number;
    bool has_txn;
} cs_entry_t;

/* Read the fields of entry doc into e (views into doc). */
static bool entry_read(const bson_t *doc, cs_entry_t *e)
{
    bson_iter_t it;
    memset(e, 0, sizeof(*e));
    if (!bson_iter_init(&it, doc))
        return false;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "op") == 0 && BSON_ITER_HOLDS_UTF8(&it))
            e->op = bson_iter_utf8(&it, NULL)[0];
        else if (strcmp(k, "ns") == 0 && BSON_ITER_HOLDS_UTF8(&it))
            e->ns = bson_iter_utf8(&it, NULL);
        else if (strcmp(k, "ui") == 0 && BSON_ITER_HOLDS_BINARY(&it)) {
            bson_subtype_t stp;
            uint32_t len;
            const uint8_t *data;
            bson_iter_binary(&it, &stp, &len, &data);
            e->uuid = len == 16 ? data : NULL;
        } else if (strcmp(k, "o") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it))
            e->has_o = sbl_iter_doc(&it, &e->o);
        else if (strcmp(k, "o2") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it))
            e->has_o2 = sbl_iter_doc(&it, &e->o2);
        else if (strcmp(k, "diff") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it))
            e->has_diff = sbl_iter_doc(&it, &e->diff);
        else if (strcmp(k, "ts") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            uint32_t t, i;
            bson_iter_timestamp(&it, &t, &i);
            e->ts = (uint64_t)t << 32 | i;
        } else if (strcmp(k, "wall") == 0 && BSON_ITER_HOLDS_DATE_TIME(&it))
            e->wall = bson_iter_date_time(&it);
        else if (strcmp(k, "txnNumber") == 0 && BSON_ITER_HOLDS_NUMBER(&it)) {
            e->txn_number = bson_iter_as_int64(&it);
            e->has_txn = true;
        }
    }
    return e->op != 0 && e->ns != NULL && e->has_o;
}

/* Whether a document change in ns belongs to this stream. */
static bool watches_ns(const cs_state_t *st, const char *ns)
{
    char db[SBL_NS_MAX];
    const char *coll;
    split_ns(ns, db, sizeof(db), &coll);
    if (strncmp(coll, "system.", 7) == 0 || coll[0] == '\0')
        return false;
    switch (st->scope) {
    case CS_COLL:
        return strcmp(db, st->db) == 0 && strcmp(coll, st->coll) == 0;
    case CS_DB:
        return strcmp(db, st->db) == 0;
    case CS_CLUSTER:
        return strcmp(db, "admin") != 0 && strcmp(db, "config") != 0 &&
               strcmp(db, "local") != 0;
    }
    return false;
}

/* updateDescription from a $v:2 diff, paths under prefix. */
static void diff_walk(const bson_t *diff, const char *prefix, bson_t *upd, bson_t *rem,
                      bson_t *trunc, uint32_t *nrem, uint32_t *ntrunc)
{
    bson_iter_t it, f;
    char path[1024], key[16];
    const char *k;
    bool is_array = bson_iter_init_find(&it, diff, "a") && BSON_ITER_HOLDS_BOOL(&it);
#define PATH(name)                                                                       \
    (prefix[0] ? (snprintf(path, sizeof(path), "%s.%s", prefix, name), path)             \
               : (snprintf(path, sizeof(path), "%s", name), path))
    if (!bson_iter_init(&it, diff))
        return;
    while (bson_iter_next(&it)) {
        const char *name = bson_iter_key(&it);
        if (is_array) {
            if (strcmp(name, "a") == 0)
                continue;
            if (strcmp(name, "l") == 0 && BSON_ITER_HOLDS_NUMBER(&it)) {
                bson_t t;
                bson_uint32_to_string((*ntrunc)++, &k, key, sizeof(key));
                bson_append_document_begin(trunc, k, -1, &t);
                BSON_APPEND_UTF8(&t, "field", prefix);
                BSON_APPEND_INT32(&t, "newSize", (int32_t)bson_iter_as_int64(&it));
                bson_append_document_end(trunc, &t);
            } else if (name[0] == 'u') {
                bson_append_iter(upd, PATH(name + 1), -1, &it);
            } else if (name[0] == 's' && BSON_ITER_HOLDS_DOCUMENT(&it)) {
                bson_t sub;
                char sp[1024];
                sbl_iter_doc(&it, &sub);
                snprintf(sp, sizeof(sp), "%s", PATH(name + 1));
                diff_walk(&sub, sp, upd, rem, trunc, nrem, ntrunc);
            }
            continue;
        }
        if ((strcmp(name, "u") == 0 || strcmp(name, "i") == 0) &&
            BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_recurse(&it, &f);
            while (bson_iter_next(&f))
                bson_append_iter(upd, PATH(bson_iter_key(&f)), -1, &f);
        } else if (strcmp(name, "d") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_recurse(&it, &f);
            while (bson_iter_next(&f)) {
                bson_uint32_to_string((*nrem)++, &k, key, sizeof(key));
                bson_append_utf8(rem, k, -1, PATH(bson_iter_key(&f)), -1);
            }
        } else if (name[0] == 's' && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_t sub;
            char sp[1024];
            sbl_iter_doc(&it, &sub);
            snprintf(sp, sizeof(sp), "%s", PATH(name + 1));
            diff_walk(&sub, sp, upd, rem, trunc, nrem, ntrunc);
        }
    }
#undef PATH
}

static void append_update_description(const cs_state_t *st, const cs_entry_t *e, bson_t *ev)
{
    bson_t ud, upd = BSON_INITIALIZER, rem = BSON_INITIALIZER, trunc = BSON_INITIALIZER;
    uint32_t nrem = 0, ntrunc = 0;
    if (e->has_diff)
        diff_walk(&e->diff, "", &upd, &rem, &trunc, &nrem, &ntrunc);
    BSON_APPEND_DOCUMENT_BEGIN(ev, "updateDescription", &ud);
    BSON_APPEND_DOCUMENT(&ud, "updatedFields", &upd);
    BSON_APPEND_ARRAY(&ud, "removedFields", &rem);
    BSON_APPEND_ARRAY(&ud, "truncatedArrays", &trunc);
    if (st->expanded) {
        bson_t dp = BSON_INITIALIZER;
        BSON_APPEND_DOCUMENT(&ud, "disambiguatedPaths", &dp);
        bson_destroy(&dp);
    }
    bson_append_document_end(ev, &ud);
    bson_destroy(&upd);
    bson_destroy(&rem);
    bson_destroy(&trunc);
}

/* The collection's changeStreamPreAndPostImages.enabled. */
static bool images_enabled(sbl_session_t *ss, const char *ns)
{
    sbl_coll_t *c = NULL;
    sbl_err_t e;
    bson_iter_t it, f;
    bool on = false;
    sbl_err_clear(&e);
    if (sbl_coll_open(ss, ns, false, &c, NULL, &e) != 0)
        return false;
    const bson_t *o = sbl_coll_options(c);
    on = o != NULL && bson_iter_init_find(&it, o, "changeStreamPreAndPostImages") &&
         BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &f) &&
         bson_iter_find(&f, "enabled") && bson_iter_as_bool(&f);
    sbl_coll_release(c);
    return on;
}

/* Look up the document with key's _id in ns (found: *doc initialised). */
static bool lookup(sbl_session_t *ss, const char *ns, const bson_t *key, bson_t *doc)
{
    sbl_coll_t *c = NULL;
    sbl_err_t e;
    bson_iter_t it;
    bool found = false;
    sbl_err_clear(&e);
    if (!bson_iter_init_find(&it, key, "_id") ||
        sbl_coll_open(ss, ns, false, &c, NULL, &e) != 0)
        return false;
    if (sbl_coll_get(ss, c, bson_iter_value(&it), doc, &found, &e) != 0)
        found = false;
    sbl_coll_release(c);
    return found;
}

/* The pre-image of the change at ts (config.system.preimages). */
static bool lookup_preimage(sbl_session_t *ss, const cs_entry_t *e, bson_t *doc)
{
    bson_t key = BSON_INITIALIZER, id, stored;
    bool found = false;
    if (e->uuid == NULL)
        return false;
    BSON_APPEND_DOCUMENT_BEGIN(&key, "_id", &id);
    bson_append_binary(&id, "nsUUID", -1, BSON_SUBTYPE_UUID, e->uuid, 16);
    bson_append_timestamp(&id, "ts", -1, (uint32_t)(e->ts >> 32), (uint32_t)e->ts);
    BSON_APPEND_INT64(&id, "applyOpsIndex", 0);
    bson_append_document_end(&key, &id);
    if (lookup(ss, SBL_PREIMAGES_NS, &key, &stored)) {
        bson_iter_t it;
        bson_t pre;
        if (bson_iter_init_find(&it, &stored, "preImage") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
            sbl_iter_doc(&it, &pre)) {
            bson_copy_to(&pre, doc);
            found = true;
        }
        bson_destroy(&stored);
    }
    bson_destroy(&key);
    return found;
}

/* Begin an event: _id (its token), operationType, clusterTime, collectionUUID
 * (showExpandedEvents), wallTime, a transaction's txnNumber and lsid. */
static char *event_begin(const cs_state_t *st, const cs_entry_t *e, const sbl_cs_pos_t *pos,
                         const char *type, const bson_t *key, const bson_t *desc, bson_t *ev)
{
    bson_t id = BSON_INITIALIZER, eid = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&eid, "operationType", type);
    if (key != NULL)
        BSON_APPEND_DOCUMENT(&eid, "documentKey", key);
    else if (desc != NULL)
        BSON_APPEND_DOCUMENT(&eid, "operationDescription", desc);
    sbl_cs_token_make(pos, pos->from_invalidate ? NULL : e->uuid, &eid, &id);
    BSON_APPEND_DOCUMENT(ev, "_id", &id);
    BSON_APPEND_UTF8(ev, "operationType", type);
    bson_append_timestamp(ev, "clusterTime", -1, (uint32_t)(e->ts >> 32), (uint32_t)e->ts);
    if (st->expanded && e->uuid != NULL && !pos->from_invalidate)
        bson_append_binary(ev, "collectionUUID", -1, BSON_SUBTYPE_UUID, e->uuid, 16);
    BSON_APPEND_DATE_TIME(ev, "wallTime", e->wall);
    if (e->has_txn && e->lsid != NULL && !pos->from_invalidate) {
        BSON_APPEND_INT64(ev, "txnNumber", e->txn_number);
        bson_append_iter(ev, "lsid", -1, e->lsid);
    }
    char *tok = token_str(&id);
    bson_destroy(&id);
    bson_destroy(&eid);
    return tok;
}

/* Run the later stages on ev (taken) and queue what comes out. */
static int emit(cs_state_t *st, sbl_opctx_t *ctx, const sbl_cs_pos_t *pos, bson_t *ev,
                char *token, sbl_err_t *err)
{
    if (st->has_skip && sbl_cs_pos_cmp(pos, &st->skip) <= 0) {
        bson_destroy(ev);
        bson_free(token);
        return 0;
    }
    if (st->rest == NULL) {
        queue_push(st, ev, token);
        return 0;
    }
    bson_t empty = BSON_INITIALIZER;
    sbl_agg_env_t env = {.ctx = ctx, .db = st->db, .let = &empty, .now_ms = sbl_now_ms(),
                         .allow_disk = -1};
    sbl_docvec_t dv = {0};
    sbl_docvec_push(&dv, ev);
    int rc = sbl_agg_run(&env, st->cursor_ns, st->rest, 0, &dv, err);
    for (size_t i = 0; rc == 0 && i < dv.n; i++) {
        bson_iter_t it;
        bson_t t;
        if (!bson_iter_init_find(&it, dv.v[i], "_id") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
            !sbl_iter_doc(&it, &t) || !bson_iter_init_find(&it, &t, "_data") ||
            !BSON_ITER_HOLDS_UTF8(&it) || strcmp(bson_iter_utf8(&it, NULL), token) != 0) {
            rc = sbl_err_set(err, SBL_E_ChangeStreamFatalError,
                             "Encountered an event whose _id field, which contains the resume "
                             "token, was modified by the pipeline. Modifying the _id field of an "
                             "event makes it impossible to resume the stream from that point. "
                             "Only transformations that retain the unmodified _id field are "
                             "allowed.");
            break;
        }
        queue_push(st, dv.v[i], bson_strdup(token));
        dv.v[i] = NULL;
    }
    for (size_t i = 0; i < dv.n; i++)
        if (dv.v[i] != NULL)
            bson_destroy(dv.v[i]);
    bson_free(dv.v);
    bson_destroy(&empty);
    bson_free(token);
    return rc;
}

/* The invalidate event after a drop, rename or dropDatabase. */
static int emit_invalidate(cs_state_t *st, sbl_opctx_t *ctx, const cs_entry_t *e,
                           int64_t op_index, sbl_err_t *err)
{
    sbl_cs_pos_t pos = {.ts = e->ts, .event = true, .op_index = op_index,
                        .from_invalidate = true};
    if (st->has_skip && sbl_cs_pos_cmp(&pos, &st->skip) <= 0)
        return 0; /* startAfter this invalidate: the stream goes on past it */
    bson_t *ev = bson_new();
    char *tok = event_begin(st, e, &pos, "invalidate", NULL, NULL, ev);
    st->invalidated = true;
    return emit(st, ctx, &pos, ev, tok, err);
}

/* A document change: insert, update, replace, delete. */
static int crud_event(cs_state_t *st, sbl_opctx_t *ctx, const cs_entry_t *e, int64_t op_index,
                      sbl_err_t *err)
{
    sbl_cs_pos_t pos = {.ts = e->ts, .event = true, .op_index = op_index};
    bson_t key = BSON_INITIALIZER, full, pre;
    bool has_full = false, has_pre = false;
    const char *type;
    bson_iter_t it;
    const bson_t *keysrc = e->op == 'd' ? &e->o : e->has_o2 ? &e->o2 : &e->o;
    if (bson_iter_init_find(&it, keysrc, "_id"))
        bson_append_iter(&key, "_id", 3, &it);
    type = e->op == 'i' ? "insert" : e->op == 'd' ? "delete" : e->has_diff ? "update" : "replace";

    char db[SBL_NS_MAX];
    const char *coll;
    split_ns(e->ns, db, sizeof(db), &coll);
    int rc = 0;
    if (e->op == 'u' && e->has_diff) {
        if (st->full_doc == FD_LOOKUP) {
            has_full = lookup(ctx->ss, e->ns, &key, &full);
        } else if (st->full_doc == FD_WHEN_AVAILABLE || st->full_doc == FD_REQUIRED) {
            if (images_enabled(ctx->ss, e->ns)) {
                bson_copy_to(&e->o, &full); /* the entry holds the post-image */
                has_full = true;
            } else if (st->full_doc == FD_REQUIRED) {
                rc = sbl_err_set(err, SBL_E_NoMatchingDocument,
                                 "Change stream was configured to require a post-image for all "
                                 "update, delete and replace events, but the post-image was not "
                                 "found for event: {ns: \"%s\"}",
                                 e->ns);
            }
        }
    }
    if (rc == 0 && st->pre != PRE_OFF && e->op != 'i') {
        has_pre = lookup_preimage(ctx->ss, e, &pre);
        if (!has_pre && st->pre == PRE_REQUIRED)
            rc = sbl_err_set(err, SBL_E_NoMatchingDocument,
                             "Change stream was configured to require a pre-image for all "
                             "update, delete and replace events, but the pre-image was not found "
                             "for event: {ns: \"%s\"}",
                             e->ns);
    }
    if (rc != 0) {
        bson_destroy(&key);
        if (has_full)
            bson_destroy(&full);
        return rc;
    }
    bson_t *ev = bson_new();
    char *tok = event_begin(st, e, &pos, type, &key, NULL, ev);
    if (e->op == 'i' || (e->op == 'u' && !e->has_diff))
        BSON_APPEND_DOCUMENT(ev, "fullDocument", &e->o);
    append_ns(ev, "ns", db, coll);
    BSON_APPEND_DOCUMENT(ev, "documentKey", &key);
    if (e->op == 'u' && e->has_diff) {
        append_update_description(st, e, ev);
        if (has_full)
            BSON_APPEND_DOCUMENT(ev, "fullDocument", &full);
        else if (st->full_doc != FD_DEFAULT)
            BSON_APPEND_NULL(ev, "fullDocument");
    }
    if (st->pre != PRE_OFF && e->op != 'i') {
        if (has_pre)
            BSON_APPEND_DOCUMENT(ev, "fullDocumentBeforeChange", &pre);
        else
            BSON_APPEND_NULL(ev, "fullDocumentBeforeChange");
    }
    if (has_full)
        bson_destroy(&full);
    if (has_pre)
        bson_destroy(&pre);
    bson_destroy(&key);
    return emit(st, ctx, &pos, ev, tok, err);
}

/* A catalog change ("c" entry other than applyOps). */
static int command_event(cs_state_t *st, sbl_opctx_t *ctx, const cs_entry_t *e,
                         int64_t op_index, sbl_err_t *err)
{
    bson_iter_t it;
    char db[SBL_NS_MAX];
    const char *dummy;
    sbl_cs_pos_t pos = {.ts = e->ts, .event = true, .op_index = op_index};
    split_ns(e->ns, db, sizeof(db), &dummy);
    if (!bson_iter_init(&it, &e->o) || !bson_iter_next(&it))
        return 0;
    const char *cmd = bson_iter_key(&it);
    const char *arg = BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
    char ns[SBL_NS_MAX * 2];
    snprintf(ns, sizeof(ns), "%s.%s", db, arg);
    bool in_scope_db = st->scope == CS_CLUSTER ? strcmp(db, "admin") != 0 &&
                                                     strcmp(db, "config") != 0 &&
                                                     strcmp(db, "local") != 0
                                               : strcmp(db, st->db) == 0;

    if (strcmp(cmd, "dropDatabase") == 0) {
        if (!in_scope_db)
            return 0;
        if (st->scope == CS_COLL) { /* mongod logs a drop of each collection first */
            bson_t *ev = bson_new();
            char *tok = event_begin(st, e, &pos, "drop", NULL, NULL, ev);
            append_ns(ev, "ns", st->db, st->coll);
            SBL_RET(emit(st, ctx, &pos, ev, tok, err));
            return emit_invalidate(st, ctx, e, op_index, err);
        }
        bson_t *ev = bson_new();
        char *tok = event_begin(st, e, &pos, "dropDatabase", NULL, NULL, ev);
        append_ns(ev, "ns", db, NULL);
        SBL_RET(emit(st, ctx, &pos, ev, tok, err));
        return st->scope == CS_DB ? emit_invalidate(st, ctx, e, op_index, err) : 0;
    }
    if (strcmp(cmd, "renameCollection") == 0) {
        bson_iter_t t;
        const char *to = bson_iter_init_find(&t, &e->o, "to") && BSON_ITER_HOLDS_UTF8(&t)
                             ? bson_iter_utf8(&t, NULL) : "";
        bool from_in = watches_ns(st, arg), to_in = watches_ns(st, to);
        if (!from_in && !(to_in && st->scope != CS_COLL))
            return 0;
        char tdb[SBL_NS_MAX], fdb[SBL_NS_MAX];
        const char *tcoll, *fcoll;
        split_ns(to, tdb, sizeof(tdb), &tcoll);
        split_ns(arg, fdb, sizeof(fdb), &fcoll);
        bson_t desc = BSON_INITIALIZER;
        append_ns(&desc, "to", tdb, tcoll);
        bson_t *ev = bson_new();
        char *tok = event_begin(st, e, &pos, "rename", NULL, &desc, ev);
        append_ns(ev, "ns", fdb, fcoll);
        append_ns(ev, "to", tdb, tcoll);
        if (st->expanded)
            BSON_APPEND_DOCUMENT(ev, "operationDescription", &desc);
        bson_destroy(&desc);
        SBL_RET(emit(st, ctx, &pos, ev, tok, err));
        return st->scope == CS_COLL ? emit_invalidate(st, ctx, e, op_index, err) : 0;
    }
    if (!watches_ns(st, ns))
        return 0;
    if (strcmp(cmd, "drop") == 0) {
        bson_t *ev = bson_new();
        char *tok = event_begin(st, e, &pos, "drop", NULL, NULL, ev);
        append_ns(ev, "ns", db, arg);
        SBL_RET(emit(st, ctx, &pos, ev, tok, err));
        return st->scope == CS_COLL ? emit_invalidate(st, ctx, e, op_index, err) : 0;
    }
    if (!st->expanded)
        return 0;
    bson_t desc = BSON_INITIALIZER;
    const char *type = NULL;
    if (strcmp(cmd, "create") == 0) {
        type = "create";
        bson_copy_to_excluding_noinit(&e->o, &desc, "create", NULL);
    } else if (strcmp(cmd, "createIndexes") == 0 || strcmp(cmd, "dropIndexes") == 0) {
        bson_t arr, spec = BSON_INITIALIZER;
        type = cmd;
        if (cmd[0] == 'c')
            bson_copy_to_excluding_noinit(&e->o, &spec, "createIndexes", NULL);
        else if (e->has_o2)
            bson_copy_to(&e->o2, &spec);
        BSON_APPEND_ARRAY_BEGIN(&desc, "indexes", &arr);
        BSON_APPEND_DOCUMENT(&arr, "0", &spec);
        bson_append_array_end(&desc, &arr);
        bson_destroy(&spec);
    } else if (strcmp(cmd, "collMod") == 0) {
        type = "modify";
        bson_copy_to_excluding_noinit(&e->o, &desc, "collMod", NULL);
    }
    if (type == NULL) {
        bson_destroy(&desc);
        return 0;
    }
    bson_t *ev = bson_new();
    char *tok = event_begin(st, e, &pos, type, NULL, &desc, ev);
    append_ns(ev, "ns", db, arg);
    BSON_APPEND_DOCUMENT(ev, "operationDescription", &desc);
    bson_destroy(&desc);
    return emit(st, ctx, &pos, ev, tok, err);
}

/* One oplog entry: its events (none, one, or an event and an invalidate;
 * an applyOps entry's operations one by one with their txnOpIndex). */
static int entry_events(cs_state_t *st, sbl_opctx_t *ctx, const bson_t *doc, sbl_err_t *err)
{
    cs_entry_t e;
    bson_iter_t it, ops, lsid;
    if (!entry_read(doc, &e))
        return 0;
    if (bson_iter_init_find(&lsid, doc, "lsid") && BSON_ITER_HOLDS_DOCUMENT(&lsid))
        e.lsid = &lsid;
    if (e.op == 'c' && bson_iter_init_find(&it, &e.o, "applyOps") &&
        BSON_ITER_HOLDS_ARRAY(&it)) {
        int64_t idx = 0;
        bson_iter_recurse(&it, &ops);
        while (bson_iter_next(&ops)) {
            bson_t inner;
            cs_entry_t ie;
            if (!BSON_ITER_HOLDS_DOCUMENT(&ops) || !sbl_iter_doc(&ops, &inner) ||
                !entry_read(&inner, &ie)) {
                idx++;
                continue;
            }
            ie.ts = e.ts;
            ie.wall = e.wall;
            ie.lsid = e.lsid;
            ie.txn_number = e.txn_number;
            ie.has_txn = e.has_txn;
            if ((ie.op == 'i' || ie.op == 'u' || ie.op == 'd') && watches_ns(st, ie.ns))
                SBL_RET(crud_event(st, ctx, &ie, idx, err));
            idx++;
        }
        return 0;
    }
    if ((e.op == 'i' || e.op == 'u' || e.op == 'd') && watches_ns(st, e.ns))
        return crud_event(st, ctx, &e, 0, err);
    if (e.op == 'c')
        return command_event(st, ctx, &e, 0, err);
    return 0;
}

static int history_lost(sbl_err_t *err)
{
    return sbl_err_set(err, SBL_E_ChangeStreamHistoryLost,
                       "Resume of change stream was not possible, as the resume point may no "
                       "longer be in the oplog.");
}

/* Read the next entries (at most up to the commit point) into the queue. */
static int refill(cs_state_t *st, sbl_opctx_t *ctx, sbl_err_t *err)
{
    sbl_coll_t *oplog = NULL;
    sbl_scan_t *scan = NULL;
    uint64_t majority = sbl_repl_majority_ts();
    int rc;
    if (majority < st->next_lo)
        return 0;
    SBL_RET(sbl_coll_open(ctx->ss, SBL_OPLOG_NS, false, &oplog, NULL, err));
    if (st->scanned != 0) { /* the last entry consumed must still be there */
        bson_value_t v = {.value_type = BSON_TYPE_TIMESTAMP};
        bson_t d;
        bool found = false;
        v.value.v_timestamp.timestamp = (uint32_t)(st->scanned >> 32);
        v.value.v_timestamp.increment = (uint32_t)st->scanned;
        rc = sbl_coll_get(ctx->ss, oplog, &v, &d, &found, err);
        if (rc == 0 && found)
            bson_destroy(&d);
        if (rc == 0 && !found)
            rc = history_lost(err);
        if (rc != 0) {
            sbl_coll_release(oplog);
            return rc;
        }
    }
    bson_value_t lo = {.value_type = BSON_TYPE_TIMESTAMP};
    lo.value.v_timestamp.timestamp = (uint32_t)(st->next_lo >> 32);
    lo.value.v_timestamp.increment = (uint32_t)st->next_lo;
    sbl_scan_bounds_t b = {.lo = &lo, .lo_inclusive = true};
    rc = sbl_scan_open(ctx->ss, oplog, &b, false, &scan, err);
    for (int n = 0; rc == 0 && n < REFILL_ENTRIES && !st->invalidated; n++) {
        bson_t doc;
        bool done = false;
        bson_iter_t it;
        if ((rc = sbl_scan_next(scan, &doc, &done, err)) != 0 || done)
            break;
        if (!bson_iter_init_find(&it, &doc, "ts") || !BSON_ITER_HOLDS_TIMESTAMP(&it))
            continue;
        uint32_t t, i;
        bson_iter_timestamp(&it, &t, &i);
        uint64_t ts = (uint64_t)t << 32 | i;
        if (ts > majority)
            break;
        rc = entry_events(st, ctx, &doc, err);
        st->scanned = ts;
        st->next_lo = ts + 1;
        if (st->qn - st->qi >= REFILL_ENTRIES)
            break;
    }
    if (scan != NULL)
        sbl_scan_close(scan);
    sbl_coll_release(oplog);
    return rc;
}

static int cs_next(void *state, sbl_opctx_t *ctx, bson_t *doc, bool *donep, sbl_err_t *err)
{
    cs_state_t *st = state;
    *donep = false;
    if (st->qi == st->qn && !st->invalidated)
        SBL_RET(refill(st, ctx, err));
    if (st->qi == st->qn) {
        *donep = true;
        return 0;
    }
    cs_item_t *it = &st->q[st->qi++];
    if (!bson_steal(doc, it->doc)) {
        bson_copy_to(it->doc, doc);
        bson_destroy(it->doc);
    }
    set_str(&st->tok_prev, st->tok_last);
    st->tok_last = it->token;
    it->doc = NULL;
    it->token = NULL;
    return 0;
}

static bool cs_finished(void *state)
{
    cs_state_t *st = state;
    return st->invalidated && st->qi == st->qn;
}

static void cs_annotate(void *state, bool has_pending, bson_t *cursor_doc)
{
    cs_state_t *st = state;
    const char *tok;
    if (has_pending) /* the last event produced waits for the next batch */
        tok = st->tok_prev;
    else if (st->qi < st->qn)
        tok = st->tok_last;
    else { /* everything read was sent: the latest of the last event, the start
            * point and the high-water mark of the last entry read */
        tok = st->tok_last != NULL && strcmp(st->tok_last, st->tok_hwm) > 0 ? st->tok_last
                                                                            : st->tok_hwm;
        if (st->scanned != 0) {
            char *h = hwm_token(st->scanned);
            if (strcmp(h, tok) > 0) {
                set_str(&st->tok_hwm, h);
                tok = st->tok_hwm;
            } else {
                bson_free(h);
            }
        }
    }
    if (tok == NULL)
        tok = st->tok_hwm;
    bson_t t;
    BSON_APPEND_DOCUMENT_BEGIN(cursor_doc, "postBatchResumeToken", &t);
    BSON_APPEND_UTF8(&t, "_data", tok);
    bson_append_document_end(cursor_doc, &t);
}

static const sbl_cursor_source_t cs_source = {cs_next, cs_free, cs_finished, cs_annotate};

/* ---- the stage's options ------------------------------------------------------- */

static bool stage_allowed(const char *name)
{
    static const char *const ok[] = {"$match", "$project", "$addFields", "$set", "$unset",
                                     "$replaceRoot", "$replaceWith", "$redact",
                                     "$changeStreamSplitLargeEvent", NULL};
    for (int i = 0; ok[i] != NULL; i++)
        if (strcmp(name, ok[i]) == 0)
            return true;
    return false;
}

/* Stages of 7.0 that a change stream refuses (others are unknown: 40324). */
static bool stage_known(const char *name)
{
    static const char *const known[] = {
        "$group", "$sort", "$limit", "$skip", "$lookup", "$unwind", "$facet", "$bucket",
        "$bucketAuto", "$count", "$out", "$merge", "$sample", "$sortByCount", "$graphLookup",
        "$unionWith", "$geoNear", "$densify", "$fill", "$setWindowFields", "$documents",
        "$collStats", "$indexStats", "$currentOp", "$listSessions", "$listLocalSessions",
        "$planCacheStats", "$search", "$searchMeta", NULL};
    for (int i = 0; known[i] != NULL; i++)
        if (strcmp(name, known[i]) == 0)
            return true;
    return false;
}

/* Check the stages after $changeStream; copy the ones that run into st->rest. */
static int parse_rest(cs_state_t *st, const bson_t *pipeline, sbl_err_t *err)
{
    bson_iter_t s, f;
    uint32_t i = 0, n = 0;
    bson_t *rest = bson_new();
    bson_iter_init(&s, pipeline);
    while (bson_iter_next(&s)) {
        bson_iter_recurse(&s, &f);
        bson_iter_next(&f);
        const char *name = bson_iter_key(&f);
        if (i++ == 0)
            continue;
        if (strcmp(name, "$changeStream") == 0) {
            bson_destroy(rest);
            return sbl_err_set(err, 40602, "$changeStream is only valid as the first stage in a "
                                           "pipeline");
        }
        if (!stage_allowed(name)) {
            bson_destroy(rest);
            if (!stage_known(name))
                return sbl_err_set(err, SBL_E_UnrecognizedStage,
                                   "Unrecognized pipeline stage name: '%s'", name);
            return sbl_err_set(err, SBL_E_IllegalOperation,
                               "%s is not permitted in a $changeStream pipeline", name);
        }
        if (strcmp(name, "$changeStreamSplitLargeEvent") == 0)
            continue; /* events stay under 16 MiB here: nothing to split */
        char key[16];
        const char *k;
        bson_uint32_to_string(n++, &k, key, sizeof(key));
        bson_append_iter(rest, k, -1, &s);
    }
    if (n == 0) {
        bson_destroy(rest);
        rest = NULL;
    }
    st->rest = rest;
    return 0;
}

static int oldest_ts(sbl_session_t *ss, uint64_t *tsp, sbl_err_t *err)
{
    sbl_coll_t *oplog = NULL;
    sbl_scan_t *scan = NULL;
    bson_t doc;
    bool done = false;
    bson_iter_t it;
    *tsp = 0;
    SBL_RET(sbl_coll_open(ss, SBL_OPLOG_NS, false, &oplog, NULL, err));
    int rc = sbl_scan_open(ss, oplog, NULL, false, &scan, err);
    if (rc == 0 && (rc = sbl_scan_next(scan, &doc, &done, err)) == 0 && !done &&
        bson_iter_init_find(&it, &doc, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        uint32_t t, i;
        bson_iter_timestamp(&it, &t, &i);
        *tsp = (uint64_t)t << 32 | i;
    }
    if (scan != NULL)
        sbl_scan_close(scan);
    sbl_coll_release(oplog);
    return rc;
}

static int parse_spec(cs_state_t *st, const bson_iter_t *specit, bool *all_cluster,
                      sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    bson_t spec, resume;
    bool has_resume = false, resume_after = false, start_after = false, has_start_at = false;
    uint64_t start_at = 0;
    if (!BSON_ITER_HOLDS_DOCUMENT(specit))
        return sbl_err_set(err, 50808, "$changeStream stage expects a document as argument");
    sbl_iter_doc(specit, &spec);
    bson_iter_init(&it, &spec);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "fullDocument") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return sbl_type_error(err, "$changeStream.fullDocument", &it, "string");
            const char *v = bson_iter_utf8(&it, NULL);
            if (strcmp(v, "default") == 0)
                st->full_doc = FD_DEFAULT;
            else if (strcmp(v, "updateLookup") == 0)
                st->full_doc = FD_LOOKUP;
            else if (strcmp(v, "whenAvailable") == 0)
                st->full_doc = FD_WHEN_AVAILABLE;
            else if (strcmp(v, "required") == 0)
                st->full_doc = FD_REQUIRED;
            else
                return sbl_err_set(err, SBL_E_BadValue,
                                   "'%s' is not a valid value for $changeStream.fullDocument", v);
        } else if (strcmp(k, "fullDocumentBeforeChange") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return sbl_type_error(err, "$changeStream.fullDocumentBeforeChange", &it,
                                      "string");
            const char *v = bson_iter_utf8(&it, NULL);
            if (strcmp(v, "off") == 0)
                st->pre = PRE_OFF;
            else if (strcmp(v, "whenAvailable") == 0)
                st->pre = PRE_WHEN_AVAILABLE;
            else if (strcmp(v, "required") == 0)
                st->pre = PRE_REQUIRED;
            else
                return sbl_err_set(err, SBL_E_BadValue,
                                   "'%s' is not a valid value for "
                                   "$changeStream.fullDocumentBeforeChange", v);
        } else if (strcmp(k, "resumeAfter") == 0 || strcmp(k, "startAfter") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return sbl_type_error(err, k[0] == 'r' ? "$changeStream.resumeAfter"
                                                       : "$changeStream.startAfter",
                                      &it, "object");
            sbl_iter_doc(&it, &resume);
            if (k[0] == 'r')
                resume_after = true;
            else
                start_after = true;
            has_resume = true;
        } else if (strcmp(k, "startAtOperationTime") == 0) {
            if (!BSON_ITER_HOLDS_TIMESTAMP(&it))
                return sbl_type_error(err, "$changeStream.startAtOperationTime", &it,
                                      "timestamp");
            uint32_t t, i;
            bson_iter_timestamp(&it, &t, &i);
            start_at = (uint64_t)t << 32 | i;
            has_start_at = true;
        } else if (strcmp(k, "allChangesForCluster") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it))
                return sbl_type_error(err, "$changeStream.allChangesForCluster", &it, "bool");
            *all_cluster = bson_iter_bool(&it);
        } else if (strcmp(k, "showExpandedEvents") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it))
                return sbl_type_error(err, "$changeStream.showExpandedEvents", &it, "bool");
            st->expanded = bson_iter_bool(&it);
        } else if (strcmp(k, "showSystemEvents") == 0 || strcmp(k, "showMigrationEvents") == 0 ||
                   strcmp(k, "showRawUpdateDescription") == 0 ||
                   strcmp(k, "allowToRunOnConfigDB") == 0 ||
                   strcmp(k, "allowToRunOnSystemNS") == 0) {
            /* accepted; no events of those kinds exist here */
        } else {
            return sbl_err_set(err, SBL_E_UnknownField,
                               "BSON field '$changeStream.%s' is an unknown field.", k);
        }
    }
    if (resume_after && start_after)
        return sbl_err_set(err, 50865, "Do not specify both 'resumeAfter' and 'startAfter' in a "
                                       "$changeStream stage");
    if (has_resume && has_start_at)
        return sbl_err_set(err, 40674, "Only one type of resume option is allowed, but multiple "
                                       "were found.");
    uint64_t from;
    if (has_resume) {
        SBL_RET(sbl_cs_token_parse(&resume, &st->skip, err));
        if (resume_after && st->skip.from_invalidate)
            return sbl_err_set(err, SBL_E_InvalidResumeToken,
                               "Attempting to resume a change stream using 'resumeAfter' is not "
                               "allowed from an invalidate notification.");
        st->has_skip = true;
        from = st->skip.ts;
        st->tok_hwm = token_str(&resume);
    } else if (has_start_at) {
        st->skip = (sbl_cs_pos_t){.ts = start_at};
        st->has_skip = true;
        from = start_at;
        st->tok_hwm = hwm_token(start_at);
    } else { /* from the newest entry on: everything after it */
        uint64_t last = sbl_repl_last_op_ts();
        st->skip = (sbl_cs_pos_t){.ts = last + 1};
        st->has_skip = true;
        from = last + 1;
        st->tok_hwm = hwm_token(last + 1);
    }
    st->next_lo = from;
    if (has_resume || has_start_at) {
        uint64_t oldest = 0;
        SBL_RET(oldest_ts(ctx->ss, &oldest, err));
        if (oldest == 0 || oldest > from)
            return history_lost(err);
    }
    return 0;
}

int sbl_agg_change_stream(sbl_opctx_t *ctx, const char *ns, bool collectionless,
                          const bson_t *pipeline, int64_t batch_size, sbl_err_t *err)
{
    bson_iter_t s, f;
    bool all_cluster = false;
    if (!sbl_repl_enabled())
        return sbl_err_set(err, 40573, "The $changeStream stage is only supported on replica "
                                       "sets");
    cs_state_t *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory");
    bson_iter_init(&s, pipeline);
    bson_iter_next(&s);
    bson_iter_recurse(&s, &f);
    bson_iter_next(&f);
    int rc = parse_spec(st, &f, &all_cluster, ctx, err);
    if (rc == 0)
        rc = parse_rest(st, pipeline, err);
    if (rc == 0) {
        sbl_strcpy_n(st->db, sizeof(st->db), ctx->db);
        sbl_strcpy_n(st->cursor_ns, sizeof(st->cursor_ns), ns);
        if (collectionless) {
            st->scope = all_cluster ? CS_CLUSTER : CS_DB;
            if (all_cluster && strcmp(ctx->db, "admin") != 0)
                rc = sbl_err_set(err, SBL_E_InvalidOptions,
                                 "$changeStream may only be run with "
                                 "{allChangesForCluster: true} on the admin database");
            else if (!all_cluster && (strcmp(ctx->db, "admin") == 0 ||
                                      strcmp(ctx->db, "config") == 0 ||
                                      strcmp(ctx->db, "local") == 0))
                rc = sbl_err_set(err, SBL_E_InvalidNamespace,
                                 "$changeStream may not be opened on the internal %s database",
                                 ctx->db);
        } else {
            const char *coll = ns + strlen(ctx->db) + 1;
            st->scope = CS_COLL;
            sbl_strcpy_n(st->coll, sizeof(st->coll), coll);
            if (all_cluster)
                rc = sbl_err_set(err, SBL_E_InvalidOptions,
                                 "A $changeStream with 'allChangesForCluster:true' may only be "
                                 "opened on the 'admin' database, and with no collection name");
            else if (strcmp(ctx->db, "admin") == 0 || strcmp(ctx->db, "config") == 0 ||
                     strcmp(ctx->db, "local") == 0 || strncmp(coll, "system.", 7) == 0)
                rc = sbl_err_set(err, SBL_E_InvalidNamespace,
                                 "$changeStream may not be opened on the internal %s database",
                                 ctx->db);
        }
    }
    if (rc != 0) {
        cs_free(st);
        return rc;
    }
    return sbl_cursor_first_batch_flags(ctx, ns, &cs_source, st, batch_size, false,
                                        SBL_CURSOR_TAILABLE | SBL_CURSOR_AWAIT_DATA, err);
}
