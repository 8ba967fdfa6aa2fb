/*
 * cs_events.c: oplog entries turned into mongod 7.0's change events for one
 * stream (changestream.c): document changes (insert, update with its
 * updateDescription from the entry's $v:2 diff, replace, delete, with
 * fullDocument and fullDocumentBeforeChange as asked), catalog changes
 * (drop, rename, dropDatabase, and with showExpandedEvents create,
 * createIndexes, dropIndexes, modify) and the invalidate that ends a stream.
 *
 * What must stay true: an event's _id is the resume token of its position
 * (clusterTime, txnOpIndex, fromInvalidate), so events built here sort as
 * the stream returns them; only entries of the watched namespaces give
 * events.
 */
#include "agg/cs_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "repl/repl.h"

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
    bool o_is_diff; /* o is {$v: 2, diff} (mongod's form): no new document in the entry */
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
    if (e->op == 'u' && e->has_o && sbl_repl_entry_diff(&e->o, &e->diff))
        e->o_is_diff = e->has_diff = true;
    return e->op != 0 && e->ns != NULL && e->has_o;
}

/* An update's new document: the entry's o, or the pre-image with the
 * entry's diff applied (o_is_diff); false when neither is to be had. */
static bool post_image(const cs_entry_t *e, const bson_t *pre, bool has_pre, bson_t *out)
{
    if (!e->o_is_diff) {
        bson_copy_to(&e->o, out);
        return true;
    }
    sbl_err_t err;
    sbl_err_clear(&err);
    bson_init(out);
    if (has_pre && sbl_repl_diff_apply(pre, &e->diff, out, &err) == 0)
        return true;
    bson_destroy(out);
    return false;
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

/* updateDescription being built from a $v:2 diff: its parts, and the path
 * components above the sub-diff being read (array indices marked). */
#define UD_DEPTH 100
typedef struct ud {
    bson_t upd, rem, trunc, dis;
    uint32_t nrem, ntrunc;
    int depth;
    const char *comp[UD_DEPTH];
    bool idx[UD_DEPTH];
} ud_t;

static bool numeric(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* A path whose field names include a number or a dot is ambiguous in dotted
 * form: disambiguatedPaths gives its components (array indices as ints). */
static void note_path(ud_t *u, const char *path, const char *leaf, bool leaf_idx)
{
    bool ambiguous = false;
    for (int i = 0; i <= u->depth && !ambiguous; i++) {
        const char *c = i < u->depth ? u->comp[i] : leaf;
        bool ix = i < u->depth ? u->idx[i] : leaf_idx;
        ambiguous = !ix && (numeric(c) || strchr(c, '.') != NULL);
    }
    if (!ambiguous)
        return;
    bson_t arr;
    char key[16];
    const char *k;
    bson_append_array_begin(&u->dis, path, -1, &arr);
    for (int i = 0; i <= u->depth; i++) {
        const char *c = i < u->depth ? u->comp[i] : leaf;
        bool ix = i < u->depth ? u->idx[i] : leaf_idx;
        bson_uint32_to_string((uint32_t)i, &k, key, sizeof(key));
        if (ix)
            bson_append_int32(&arr, k, -1, atoi(c));
        else
            bson_append_utf8(&arr, k, -1, c, -1);
    }
    bson_append_array_end(&u->dis, &arr);
}

static void diff_walk(ud_t *u, const bson_t *diff, const char *prefix)
{
    bson_iter_t it, f;
    char path[1024], key[16];
    const char *k;
    bool is_array = bson_iter_init_find(&it, diff, "a") && BSON_ITER_HOLDS_BOOL(&it);
#define PATH(name)                                                                       \
    (prefix[0] ? (snprintf(path, sizeof(path), "%s.%s", prefix, name), path)             \
               : (snprintf(path, sizeof(path), "%s", name), path))
    if (!bson_iter_init(&it, diff) || u->depth >= UD_DEPTH - 1)
        return;
    while (bson_iter_next(&it)) {
        const char *name = bson_iter_key(&it);
        bool sub_diff = name[0] == 's' && BSON_ITER_HOLDS_DOCUMENT(&it);
        if (is_array && strcmp(name, "l") == 0 && BSON_ITER_HOLDS_NUMBER(&it)) {
            bson_t t;
            bson_uint32_to_string(u->ntrunc++, &k, key, sizeof(key));
            bson_append_document_begin(&u->trunc, k, -1, &t);
            BSON_APPEND_UTF8(&t, "field", prefix);
            BSON_APPEND_INT32(&t, "newSize", (int32_t)bson_iter_as_int64(&it));
            bson_append_document_end(&u->trunc, &t);
        } else if (is_array && name[0] == 'u') {
            sbl_append_iter(&u->upd, PATH(name + 1), -1, &it);
            note_path(u, path, name + 1, true);
        } else if (!is_array && (strcmp(name, "u") == 0 || strcmp(name, "i") == 0) &&
                   BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_recurse(&it, &f);
            while (bson_iter_next(&f)) {
                sbl_append_iter(&u->upd, PATH(bson_iter_key(&f)), -1, &f);
                note_path(u, path, bson_iter_key(&f), false);
            }
        } else if (!is_array && strcmp(name, "d") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_recurse(&it, &f);
            while (bson_iter_next(&f)) {
                bson_uint32_to_string(u->nrem++, &k, key, sizeof(key));
                bson_append_utf8(&u->rem, k, -1, PATH(bson_iter_key(&f)), -1);
                note_path(u, path, bson_iter_key(&f), false);
            }
        } else if (sub_diff) {
            bson_t sub;
            char sp[1024];
            sbl_iter_doc(&it, &sub);
            snprintf(sp, sizeof(sp), "%s", PATH(name + 1));
            u->comp[u->depth] = name + 1;
            u->idx[u->depth++] = is_array;
            diff_walk(u, &sub, sp);
            u->depth--;
        }
    }
#undef PATH
}

static void append_update_description(const cs_state_t *st, const cs_entry_t *e, bson_t *ev)
{
    bson_t ud;
    ud_t *u = bson_aligned_alloc0(128, (sizeof(ud_t) + 127) / 128 * 128);
    bson_init(&u->upd);
    bson_init(&u->rem);
    bson_init(&u->trunc);
    bson_init(&u->dis);
    if (e->has_diff)
        diff_walk(u, &e->diff, "");
    BSON_APPEND_DOCUMENT_BEGIN(ev, "updateDescription", &ud);
    BSON_APPEND_DOCUMENT(&ud, "updatedFields", &u->upd);
    BSON_APPEND_ARRAY(&ud, "removedFields", &u->rem);
    BSON_APPEND_ARRAY(&ud, "truncatedArrays", &u->trunc);
    if (st->expanded)
        BSON_APPEND_DOCUMENT(&ud, "disambiguatedPaths", &u->dis);
    bson_append_document_end(ev, &ud);
    bson_destroy(&u->upd);
    bson_destroy(&u->rem);
    bson_destroy(&u->trunc);
    bson_destroy(&u->dis);
    bson_free(u);
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

/* The pre-image of the change at ts, operation op_index of its entry
 * (config.system.preimages). */
static bool lookup_preimage(sbl_session_t *ss, const cs_entry_t *e, int64_t op_index,
                            bson_t *doc)
{
    bson_t key = BSON_INITIALIZER, id, stored;
    bool found = false;
    if (e->uuid == NULL)
        return false;
    BSON_APPEND_DOCUMENT_BEGIN(&key, "_id", &id);
    bson_append_binary(&id, "nsUUID", -1, BSON_SUBTYPE_UUID, e->uuid, 16);
    bson_append_timestamp(&id, "ts", -1, (uint32_t)(e->ts >> 32), (uint32_t)e->ts);
    BSON_APPEND_INT64(&id, "applyOpsIndex", op_index);
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
        sbl_append_iter(ev, "lsid", -1, e->lsid);
    }
    char *tok = sbl_cs_token_str(&id);
    bson_destroy(&id);
    bson_destroy(&eid);
    return tok;
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
    st->invalidated = !st->raw; /* a feed reads on: its streams stop at it */
    return sbl_cs_emit(st, ctx, &pos, ev, tok, err);
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
        sbl_append_iter(&key, "_id", 3, &it);
    type = e->op == 'i' ? "insert" : e->op == 'd' ? "delete" : e->has_diff ? "update" : "replace";

    char db[SBL_NS_MAX];
    const char *coll;
    split_ns(e->ns, db, sizeof(db), &coll);
    int rc = 0;
    /* Images come from the stored pre-image as mongod's do: the post-image
     * of an update is there exactly when its pre-image is (the entry holds
     * it, or the diff that makes it of the pre-image), so neither is once
     * the remover took the pre-image away. */
    bool want_post = e->op == 'u' && e->has_diff &&
                     (st->full_doc == FD_WHEN_AVAILABLE || st->full_doc == FD_REQUIRED);
    bool raw_images = st->raw && st->images; /* a feed's, for the streams that want them */
    if (e->op != 'i' && (st->pre != PRE_OFF || want_post || raw_images))
        has_pre = lookup_preimage(ctx->ss, e, op_index, &pre);
    if (e->op == 'u' && e->has_diff && st->full_doc == FD_LOOKUP) {
        has_full = lookup(ctx->ss, e->ns, &key, &full);
    } else if (want_post && has_pre) {
        has_full = post_image(e, &pre, has_pre, &full);
    }
    if (rc == 0 && want_post && !has_full && st->full_doc == FD_REQUIRED) {
        rc = sbl_err_set(err, SBL_E_NoMatchingDocument,
                         "Change stream was configured to require a post-image for all update, "
                         "delete and replace events, but the post-image was not found for "
                         "event: {ns: \"%s\"}",
                         e->ns);
    }
    if (rc == 0 && !has_pre && st->pre == PRE_REQUIRED && e->op != 'i')
        rc = sbl_err_set(err, SBL_E_NoMatchingDocument,
                         "Change stream was configured to require a pre-image for all update, "
                         "delete and replace events, but the pre-image was not found for event: "
                         "{ns: \"%s\"}",
                         e->ns);
    if (rc != 0) {
        bson_destroy(&key);
        if (has_full)
            bson_destroy(&full);
        if (has_pre)
            bson_destroy(&pre);
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
    bson_destroy(&key);
    rc = sbl_cs_emit(st, ctx, &pos, ev, tok, err);
    if (rc == 0 && st->raw) { /* what sbl_cs_add_images needs for this event */
        cs_item_t *it = &st->q[st->qn - 1];
        it->kind = e->op == 'i' ? 'i' : e->op == 'd' ? 'd' : e->has_diff ? 'u' : 'r';
        it->images = raw_images;
        if (raw_images && has_pre) {
            it->pre = bson_copy(&pre);
            bson_t post;
            if (it->kind == 'u' && post_image(e, &pre, has_pre, &post)) {
                it->post = bson_copy(&post);
                bson_destroy(&post);
            }
        }
    }
    if (has_pre)
        bson_destroy(&pre);
    return rc;
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
            SBL_RET(sbl_cs_emit(st, ctx, &pos, ev, tok, err));
            return emit_invalidate(st, ctx, e, op_index, err);
        }
        bson_t *ev = bson_new();
        char *tok = event_begin(st, e, &pos, "dropDatabase", NULL, NULL, ev);
        append_ns(ev, "ns", db, NULL);
        SBL_RET(sbl_cs_emit(st, ctx, &pos, ev, tok, err));
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
        if (bson_iter_init_find(&t, &e->o, "dropTarget") &&
            (BSON_ITER_HOLDS_BINARY(&t) || (BSON_ITER_HOLDS_BOOL(&t) && bson_iter_bool(&t))))
            sbl_append_iter(&desc, "dropTarget", -1, &t); /* mongod: the dropped one's UUID */
        bson_t *ev = bson_new();
        char *tok = event_begin(st, e, &pos, "rename", NULL, &desc, ev);
        append_ns(ev, "ns", fdb, fcoll);
        append_ns(ev, "to", tdb, tcoll);
        if (st->expanded)
            BSON_APPEND_DOCUMENT(ev, "operationDescription", &desc);
        bson_destroy(&desc);
        SBL_RET(sbl_cs_emit(st, ctx, &pos, ev, tok, err));
        return st->scope == CS_COLL ? emit_invalidate(st, ctx, e, op_index, err) : 0;
    }
    if (!watches_ns(st, ns))
        return 0;
    if (strcmp(cmd, "drop") == 0) {
        bson_t *ev = bson_new();
        char *tok = event_begin(st, e, &pos, "drop", NULL, NULL, ev);
        append_ns(ev, "ns", db, arg);
        SBL_RET(sbl_cs_emit(st, ctx, &pos, ev, tok, err));
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
    if (type[0] == 'm') { /* what the collection and the index were before */
        bson_t before;
        bson_iter_t f;
        BSON_APPEND_DOCUMENT_BEGIN(ev, "stateBeforeChange", &before);
        if (e->has_o2 && bson_iter_init_find(&f, &e->o2, "collectionOptions_old"))
            sbl_append_iter(&before, "collectionOptions", -1, &f);
        if (e->has_o2 && bson_iter_init_find(&f, &e->o2, "indexOptions_old"))
            sbl_append_iter(&before, "indexOptions", -1, &f);
        bson_append_document_end(ev, &before);
    }
    bson_destroy(&desc);
    return sbl_cs_emit(st, ctx, &pos, ev, tok, err);
}

int sbl_cs_entry_events(cs_state_t *st, sbl_opctx_t *ctx, const bson_t *doc, sbl_err_t *err)
{
    cs_entry_t e;
    bson_iter_t it, ops, lsid;
    if (!entry_read(doc, &e))
        return 0;
    /* a chunk migration's copy or range deletion: not a change to the data */
    if (!st->migrations && bson_iter_init_find(&it, doc, "fromMigrate") &&
        bson_iter_as_bool(&it))
        return 0;
    if (bson_iter_init_find(&lsid, doc, "lsid") && BSON_ITER_HOLDS_DOCUMENT(&lsid))
        e.lsid = &lsid;
    /* A prepared transaction's events come at its commit, with the commit
     * entry's time, from the operations of the prepare entry it names. */
    bson_t po, prep;
    const bson_t *ops_in = &e.o;
    bool found = false;
    int kind = sbl_repl_prepared_kind(doc, &po);
    if (kind == SBL_PREP_PREPARE || kind == SBL_PREP_ABORT)
        return 0;
    if (kind == SBL_PREP_COMMIT) {
        SBL_RET(sbl_repl_prepare_entry_of(ctx->ss, doc, &prep, &found, err));
        if (!found)
            return 0;
        sbl_repl_prepared_kind(&prep, &po);
        ops_in = &po;
    }
    if (e.op == 'c' && bson_iter_init_find(&it, ops_in, "applyOps") &&
        BSON_ITER_HOLDS_ARRAY(&it)) {
        int64_t idx = 0;
        int rc = 0;
        bson_iter_recurse(&it, &ops);
        while (rc == 0 && bson_iter_next(&ops)) {
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
                rc = crud_event(st, ctx, &ie, idx, err);
            idx++;
        }
        if (found)
            bson_destroy(&prep);
        return rc;
    }
    /* a retryable write's entry has lsid and txnNumber too: its event does not */
    e.has_txn = false;
    if ((e.op == 'i' || e.op == 'u' || e.op == 'd') && watches_ns(st, e.ns))
        return crud_event(st, ctx, &e, 0, err);
    if (e.op == 'c')
        return command_event(st, ctx, &e, 0, err);
    return 0;
}

/* The "db.coll" of event doc's ns into buf ("" when it has none); *db and
 * *coll point into doc. */
static void event_ns(const bson_t *doc, char *buf, size_t n, const char **db,
                     const char **coll)
{
    bson_iter_t it, f;
    bson_t ns;
    *db = *coll = NULL;
    if (bson_iter_init_find(&it, doc, "ns") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        sbl_iter_doc(&it, &ns)) {
        if (bson_iter_init_find(&f, &ns, "db") && BSON_ITER_HOLDS_UTF8(&f))
            *db = bson_iter_utf8(&f, NULL);
        if (bson_iter_init_find(&f, &ns, "coll") && BSON_ITER_HOLDS_UTF8(&f))
            *coll = bson_iter_utf8(&f, NULL);
    }
    snprintf(buf, n, "%s.%s", *db != NULL ? *db : "", *coll != NULL ? *coll : "");
}

int sbl_cs_add_images(const cs_state_t *st, sbl_opctx_t *ctx, const cs_ev_t *ev, bson_t *doc,
                      sbl_err_t *err)
{
    char ns[SBL_NS_MAX * 2];
    const char *db, *coll;
    if (ev->kind == 0 || ev->kind == 'i')
        return 0;
    event_ns(doc, ns, sizeof(ns), &db, &coll);
    /* the checks and the fields in crud_event's order */
    bool want_post = ev->kind == 'u' &&
                     (st->full_doc == FD_WHEN_AVAILABLE || st->full_doc == FD_REQUIRED);
    if (want_post && ev->post == NULL && st->full_doc == FD_REQUIRED)
        return sbl_err_set(err, SBL_E_NoMatchingDocument,
                           "Change stream was configured to require a post-image for all "
                           "update, delete and replace events, but the post-image was not "
                           "found for event: {ns: \"%s\"}",
                           ns);
    if (st->pre == PRE_REQUIRED && ev->pre == NULL)
        return sbl_err_set(err, SBL_E_NoMatchingDocument,
                           "Change stream was configured to require a pre-image for all "
                           "update, delete and replace events, but the pre-image was not found "
                           "for event: {ns: \"%s\"}",
                           ns);
    if (ev->kind == 'u' && st->full_doc == FD_LOOKUP) {
        bson_iter_t it;
        bson_t key, full;
        if (db != NULL && coll != NULL && bson_iter_init_find(&it, doc, "documentKey") &&
            BSON_ITER_HOLDS_DOCUMENT(&it) && sbl_iter_doc(&it, &key) &&
            lookup(ctx->ss, ns, &key, &full)) {
            BSON_APPEND_DOCUMENT(doc, "fullDocument", &full);
            bson_destroy(&full);
        } else {
            BSON_APPEND_NULL(doc, "fullDocument");
        }
    } else if (want_post) {
        if (ev->post != NULL)
            BSON_APPEND_DOCUMENT(doc, "fullDocument", ev->post);
        else
            BSON_APPEND_NULL(doc, "fullDocument");
    }
    if (st->pre != PRE_OFF) {
        if (ev->pre != NULL)
            BSON_APPEND_DOCUMENT(doc, "fullDocumentBeforeChange", ev->pre);
        else
            BSON_APPEND_NULL(doc, "fullDocumentBeforeChange");
    }
    return 0;
}
