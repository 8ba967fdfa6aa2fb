/*
 * migrate.c: a chunk migration's two shard-side halves, after mongod's
 * design (docs/sharding.md, "Migrations"); this file has the donor's and
 * the helpers both use, migrate_recv.c the recipient's:
 *
 *   donor  _shardsvrMoveRange: notes the oplog position, writes its
 *          migrationCoordinators document and range deletion task
 *          (migrate_recover.c, which also settles them after a restart),
 *          asks the recipient to start (_recvChunkStart), waits for it to report "steady",
 *          enters the critical section, has the recipient take its final
 *          changes (_recvChunkCommit), commits the new owner on the config
 *          servers (_configsvrCommitChunkMigration), hands its range
 *          deletion task to the range deleter (migrate_rangedel.c: the copy
 *          goes later, in the background), refreshes its version, leaves
 *          the critical section and releases the recipient
 *          (_recvChunkReleaseCritSec).
 *          _migrateClone hands out the range's documents in batches,
 *          _transferMods the range's changes since the clone began (read
 *          from this shard's oplog: each changed _id, as its current
 *          document when it is in the range, else as a delete).
 *   recipient  a thread pulls _migrateClone into a staging collection
 *          (config.migrationStaging.<ns>), then _transferMods until nothing
 *          is left; _recvChunkCommit takes the last changes, enters the
 *          recipient's own critical section for ns and moves the staged
 *          documents into the collection.
 *
 * What must stay true: no routed query sees the range twice or not at all.
 * Before the commit the recipient's copy is only in the staging collection;
 * from moving it in until the commit both shards hold ns's critical
 * section, so no routed command on ns runs on either; after it each shard's
 * version is the new one (old routers get StaleConfig) and the donor's
 * ownership filter hides its copy, an orphan until the range deleter's
 * task removes it, from every routed read and write, majority reads
 * included (the filter is the current version's, not the snapshot's).  The
 * recipient does not leave its critical section before its move-in is
 * majority-committed and in its stable timestamp, where a readConcern
 * majority read reads.  A recipient clones nothing while a deletion task
 * of its own overlaps the range (mig_rangedel_await_overlap), so a range
 * given back is never deleted under its new owner.  No transaction that wrote the
 * collection on the donor is open when the recipient takes the last
 * changes (await_txns): one ending later would leave its writes to the
 * range on the donor, to be deleted with it.
 * One migration at a time per shard, as donor or recipient.
 */
#include "cmd/migrate_int.h"

#include "common/clock.h"
#include "common/log.h"
#include "doc/doc.h"
#include "repl/repl.h"
#include "server/server.h"
#include "shard/shard.h"
#include "storage/storage.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CLONE_BATCH 256
#define MODS_ENTRIES 500 /* changed _ids per _transferMods */
#define MODS_SCAN 5000   /* oplog entries read per _transferMods */

/* A warning line in the log (component SHARDING). */
void mig_log(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    sbl_log(SBL_LOG_WARNING, "SHARDING", 22001, msg, NULL);
}

/* sbl_array_key may read its argument twice: give it a plain value. */
const char *mig_akey(uint32_t i, char kb[16])
{
    return sbl_array_key(i, kb);
}

int64_t mig_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool mig_doc_of(const bson_t *d, const char *k, bson_t *out)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, d, k) && sbl_iter_doc(&it, out);
}

int mig_config_docs(bson_t *cmd, int max, bson_t *docs)
{
    bson_t reply = BSON_INITIALIZER;
    bson_iter_t it, b;
    int n = 0;
    BSON_APPEND_INT32(cmd, "batchSize", max);
    BSON_APPEND_BOOL(cmd, "singleBatch", true);
    sbl_cmd_run("config", cmd, &reply);
    if (bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.firstBatch", &b) &&
        bson_iter_recurse(&b, &it))
        while (n < max && bson_iter_next(&it)) {
            bson_t d;
            if (sbl_iter_doc(&it, &d))
                bson_copy_to(&d, &docs[n++]);
        }
    bson_destroy(&reply);
    return n;
}

void mig_free_docs(bson_t *docs, int n)
{
    for (int i = 0; i < n; i++)
        bson_destroy(&docs[i]);
}

bool mig_reply_batch(const bson_t *reply, int64_t *cursorp, bson_iter_t *batch)
{
    bson_iter_t it, b;
    *cursorp = 0;
    if (bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, "cursor.id", &b))
        *cursorp = bson_iter_as_int64(&b);
    return bson_iter_init(&it, reply) &&
           (bson_iter_find_descendant(&it, "cursor.firstBatch", &b) ||
            (bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, "cursor.nextBatch", &b))) &&
           BSON_ITER_HOLDS_ARRAY(&b) && bson_iter_recurse(&b, batch);
}

void mig_kill_cursor(const char *db, const char *coll, int64_t id)
{
    if (id == 0)
        return;
    bson_t cmd = BSON_INITIALIZER, ids, reply = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&cmd, "killCursors", coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "cursors", &ids);
    BSON_APPEND_INT64(&ids, "0", id);
    bson_append_array_end(&cmd, &ids);
    sbl_cmd_run(db, &cmd, &reply);
    bson_destroy(&cmd);
    bson_destroy(&reply);
}

void mig_spec_free(mig_spec_t *s)
{
    if (s->key)
        bson_destroy(s->key);
    if (s->min)
        bson_destroy(s->min);
    if (s->max)
        bson_destroy(s->max);
    memset(s, 0, sizeof(*s));
}

/* ns (the command's first field), min, max and shardKeyPattern from cmd. */
int mig_spec_parse(const bson_t *cmd, mig_spec_t *s, sbl_err_t *err)
{
    memset(s, 0, sizeof(*s));
    bson_iter_t it;
    bson_t k, mn, mx;
    if (!bson_iter_init(&it, cmd) || !bson_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it))
        return sbl_err_set(err, SBL_E_BadValue, "the command needs a namespace");
    snprintf(s->ns, sizeof(s->ns), "%s", bson_iter_utf8(&it, NULL));
    if (!mig_doc_of(cmd, "shardKeyPattern", &k) || !mig_doc_of(cmd, "min", &mn) || !mig_doc_of(cmd, "max", &mx))
        return sbl_err_set(err, SBL_E_BadValue, "the command needs min, max and "
                           "shardKeyPattern");
    s->key = bson_copy(&k);
    s->min = bson_copy(&mn);
    s->max = bson_copy(&mx);
    s->nkey = sbl_shard_key_shape(&k, &s->hashed_pos);
    if (s->nkey == 0 || s->nkey > SBL_SHARD_KEY_MAX) {
        mig_spec_free(s);
        return sbl_err_set(err, SBL_E_BadValue, "bad shardKeyPattern");
    }
    return 0;
}

static int key_cmp(const bson_value_t *vals, int n, const bson_t *bound)
{
    bson_iter_t it;
    int i = 0;
    bson_iter_init(&it, bound);
    while (i < n && bson_iter_next(&it)) {
        int c = sbl_value_compare(&vals[i], bson_iter_value(&it));
        if (c != 0)
            return c;
        i++;
    }
    return 0;
}

/* Is doc's shard key value in [min, max)?  (A missing field is null, a
 * hashed field its hash, as the router computes it: sbl_shard_key_values.) */
bool mig_in_range(const mig_spec_t *s, const bson_t *doc)
{
    bson_value_t vals[SBL_SHARD_KEY_MAX];
    sbl_shard_key_values(s->key, s->hashed_pos, doc, 0, vals);
    return key_cmp(vals, s->nkey, s->min) >= 0 && key_cmp(vals, s->nkey, s->max) < 0;
}

static bool key_may_change(const mig_spec_t *s);

bool mig_entry_in_range(sbl_session_t *ss, const mig_spec_t *s, const bson_t *e)
{
    bson_t o, o2, doc, diff;
    bson_iter_t it;
    if (!mig_doc_of(e, "o", &o))
        return false;
    if (!sbl_repl_entry_diff(&o, &diff))
        return mig_in_range(s, &o);
    if (!mig_doc_of(e, "o2", &o2))
        return false;
    if (!key_may_change(s))
        return mig_in_range(s, &o2);
    /* the diff names no shard key: the document as it is now (a key its
     * update changed is the caller's business; one deleted since, its
     * delete entry's) */
    sbl_coll_t *c = NULL;
    sbl_err_t err;
    bool found = false, in = false;
    sbl_err_clear(&err);
    if (!bson_iter_init_find(&it, &o2, "_id") ||
        sbl_coll_open(ss, s->ns, false, &c, NULL, &err) != 0)
        return true; /* cannot tell: the recipient is sent the _id */
    bson_value_t id;
    sbl_iter_value(&it, &id);
    if (sbl_coll_get(ss, c, &id, &doc, &found, &err) != 0)
        in = true;
    else if (found) {
        in = mig_in_range(s, &doc);
        bson_destroy(&doc);
    }
    sbl_coll_release(c);
    return in;
}

void mig_split_ns(const char *ns, char *db, size_t dbn, const char **coll)
{
    const char *dot = strchr(ns, '.');
    size_t n = dot ? (size_t)(dot - ns) : strlen(ns);
    if (n >= dbn)
        n = dbn - 1;
    memcpy(db, ns, n);
    db[n] = '\0';
    *coll = dot ? dot + 1 : "";
}

static void append_wc_majority(bson_t *cmd)
{
    bson_t wc;
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(cmd, &wc);
}

/* Replace (upsert) each document of arr, by _id, into db.coll. */
int mig_upsert_docs(const char *db, const char *coll, bson_iter_t *arr, int64_t *countp,
                       sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, ups, reply;
    BSON_APPEND_UTF8(&cmd, "update", coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "updates", &ups);
    int n = 0;
    char kb[16];
    while (bson_iter_next(arr)) {
        bson_t d, u, q;
        bson_iter_t id;
        if (!sbl_iter_doc(arr, &d) || !bson_iter_init_find(&id, &d, "_id"))
            continue;
        const char *k218 = mig_akey((uint32_t)n++, kb);
        BSON_APPEND_DOCUMENT_BEGIN(&ups, k218, &u);
        BSON_APPEND_DOCUMENT_BEGIN(&u, "q", &q);
        sbl_append_value(&q, "_id", 3, bson_iter_value(&id));
        bson_append_document_end(&u, &q);
        BSON_APPEND_DOCUMENT(&u, "u", &d);
        BSON_APPEND_BOOL(&u, "upsert", true);
        bson_append_document_end(&ups, &u);
    }
    bson_append_array_end(&cmd, &ups);
    int rc = 0;
    if (n > 0) {
        rc = sbl_cmd_run_checked(db, &cmd, &reply, err);
        bson_destroy(&reply);
    }
    bson_destroy(&cmd);
    if (countp)
        *countp += n;
    return rc;
}

/* ======================= donor ======================= */

static pthread_mutex_t donor_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    bool active;
    char session[160];
    mig_spec_t spec;
    int64_t cursor;      /* the clone's local cursor (0: not opened or exhausted) */
    bool clone_started, clone_done;
    uint32_t mods_t, mods_i; /* oplog position the changes are read from */
    int64_t cloned, mods;
} donor;


void mig_update_active_flag(void)
{
    sbl_shard_set_migration_active(donor.active || mig_recip_active() ||
                                   mig_recovery_pending());
}

void mig_donor_session(char *out, size_t n)
{
    pthread_mutex_lock(&donor_mu);
    snprintf(out, n, "%s", donor.active ? donor.session : "");
    pthread_mutex_unlock(&donor_mu);
}

int mig_check_session(const bson_t *cmd, const char *have, sbl_err_t *err)
{
    const char *s = sbl_doc_utf8(cmd, "sessionId");
    if (s == NULL || strcmp(s, have) != 0)
        return sbl_err_set(err, SBL_E_ConflictingOperationInProgress, "no migration session %s "
                           "is active on this shard", s ? s : "(none)");
    return 0;
}

/* A find over the range only: the shard key index between min and max (in
 * BSON order, as chunks are; a filter would bracket types).  Not for hashed
 * keys; in_range stays the judge either way. */
static void append_range_bounds(const mig_spec_t *s, bson_t *cmd)
{
    if (s->hashed_pos >= 0)
        return;
    BSON_APPEND_DOCUMENT(cmd, "hint", s->key);
    BSON_APPEND_DOCUMENT(cmd, "min", s->min);
    BSON_APPEND_DOCUMENT(cmd, "max", s->max);
}

/* Run a find over s's range (by its key index, or the whole collection
 * when that fails: no such index). */
int mig_range_find(const mig_spec_t *s, const char *db, const char *coll, int batch,
                   bson_t *reply, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&cmd, "find", coll);
    BSON_APPEND_INT32(&cmd, "batchSize", batch);
    append_range_bounds(s, &cmd);
    int rc = sbl_cmd_run_checked(db, &cmd, reply, err);
    bson_destroy(&cmd);
    if (rc != 0 && s->hashed_pos < 0) {
        bson_destroy(reply);
        bson_init(&cmd);
        BSON_APPEND_UTF8(&cmd, "find", coll);
        BSON_APPEND_INT32(&cmd, "batchSize", batch);
        memset(err, 0, sizeof(*err));
        rc = sbl_cmd_run_checked(db, &cmd, reply, err);
        bson_destroy(&cmd);
    }
    return rc;
}

/* The next batch of the range's documents: {objects: [...]} (empty at the end). */
int sbl_cmd_migrate_clone(sbl_opctx_t *ctx, sbl_err_t *err)
{
    pthread_mutex_lock(&donor_mu);
    int rc = donor.active ? mig_check_session(ctx->cmd, donor.session, err)
                          : sbl_err_set(err, SBL_E_ConflictingOperationInProgress,
                                        "no migration is active on this shard");
    char db[256];
    const char *coll;
    bson_t objs;
    uint32_t n = 0;
    char kb[16];
    BSON_APPEND_ARRAY_BEGIN(ctx->reply, "objects", &objs);
    while (rc == 0 && !donor.clone_done && n < CLONE_BATCH) {
        mig_split_ns(donor.spec.ns, db, sizeof(db), &coll);
        bson_t cmd = BSON_INITIALIZER, reply;
        if (!donor.clone_started) {
            rc = mig_range_find(&donor.spec, db, coll, CLONE_BATCH, &reply, err);
            donor.clone_started = true;
        } else {
            BSON_APPEND_INT64(&cmd, "getMore", donor.cursor);
            BSON_APPEND_UTF8(&cmd, "collection", coll);
            BSON_APPEND_INT32(&cmd, "batchSize", CLONE_BATCH);
            rc = sbl_cmd_run_checked(db, &cmd, &reply, err);
        }
        bson_destroy(&cmd);
        bson_iter_t it;
        bool has = rc == 0 && mig_reply_batch(&reply, &donor.cursor, &it);
        if (rc == 0 && donor.cursor == 0)
            donor.clone_done = true;
        if (has)
            while (bson_iter_next(&it)) {
                bson_t d;
                if (sbl_iter_doc(&it, &d) && mig_in_range(&donor.spec, &d)) {
                    const char *k338 = mig_akey(n++, kb);
                    BSON_APPEND_DOCUMENT(&objs, k338, &d);
                    donor.cloned++;
                }
            }
        bson_destroy(&reply);
    }
    bson_append_array_end(ctx->reply, &objs);
    pthread_mutex_unlock(&donor_mu);
    return rc;
}

typedef struct id_list {
    bson_value_t *v;
    size_t n, cap;
} id_list_t;

static void ids_add(id_list_t *l, const bson_value_t *v)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].value_type == v->value_type && sbl_value_compare(&l->v[i], v) == 0)
            return;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->v = realloc(l->v, l->cap * sizeof(*l->v));
    }
    bson_value_copy(v, &l->v[l->n++]);
}

static void ids_free(id_list_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        bson_value_destroy(&l->v[i]);
    free(l->v);
}

/* Can a document of the range leave it without being deleted?  Not when
 * the shard key is _id alone (_id never changes). */
static bool key_may_change(const mig_spec_t *s)
{
    bson_iter_t it;
    return !(s->nkey == 1 && bson_iter_init(&it, s->key) && bson_iter_next(&it) &&
             strcmp(bson_iter_key(&it), "_id") == 0);
}

/* Did the update whose entry is e change a shard key field?  Its diff
 * ({d: {f}, u: {f}, i: {f}, s<f>: ...}, repl_diff.c) names the top-level
 * fields it changed; a replacement (no diff) may have changed any. */
static bool update_moves_key(const mig_spec_t *s, const bson_t *e)
{
    bson_t diff, part, o;
    bson_iter_t k, it;
    if (!mig_doc_of(e, "diff", &diff) &&
        !(mig_doc_of(e, "o", &o) && sbl_repl_entry_diff(&o, &diff)))
        return true;
    bson_iter_init(&k, s->key);
    while (bson_iter_next(&k)) {
        char top[256], sub[258];
        const char *path = bson_iter_key(&k), *dot = strchr(path, '.');
        snprintf(top, sizeof(top), "%.*s", (int)(dot ? dot - path : (long)strlen(path)), path);
        snprintf(sub, sizeof(sub), "s%s", top);
        if (bson_iter_init_find(&it, &diff, sub))
            return true;
        for (const char *w = "dui"; *w; w++) {
            char wk[2] = {*w, '\0'};
            if (mig_doc_of(&diff, wk, &part) && bson_iter_init_find(&it, &part, top))
                return true;
        }
    }
    return false;
}

/* The _id an oplog entry (or applyOps sub-entry) may have changed in the
 * range, into ids: an insert or update whose new document is in the range,
 * an update that changed the shard key (the document may have left the
 * range), a delete of one that was (when the entry says; else every
 * delete).  Changes to the collection's other ranges are not the
 * recipient's business: shipping them kept the catch-up from ever
 * looking finished under a write load elsewhere on the donor. */
static void entry_id(sbl_session_t *ss, const mig_spec_t *s, const bson_t *e, id_list_t *ids)
{
    const char *op = sbl_doc_utf8(e, "op"), *ens = sbl_doc_utf8(e, "ns");
    bson_iter_t it, sub;
    bson_t o;
    if (op == NULL)
        return;
    if (strcmp(op, "c") == 0) {
        if (bson_iter_init(&it, e) && bson_iter_find_descendant(&it, "o.applyOps", &sub) &&
            bson_iter_recurse(&sub, &it))
            while (bson_iter_next(&it))
                if (sbl_iter_doc(&it, &o))
                    entry_id(ss, s, &o, ids);
        return;
    }
    if (ens == NULL || strcmp(ens, s->ns) != 0 || !mig_doc_of(e, "o", &o))
        return;
    bool mine;
    if (strcmp(op, "i") == 0) /* o: the document */
        mine = mig_in_range(s, &o);
    else if (strcmp(op, "u") == 0) /* o: the new document, or its diff */
        mine = mig_entry_in_range(ss, s, e) || (key_may_change(s) && update_moves_key(s, e));
    else if (strcmp(op, "d") == 0) /* o: {_id}; a fromMigrate one deleted a range this
                                      * shard does not own (the range deleter's), not this */
        mine = !(bson_iter_init_find(&it, e, "fromMigrate") && bson_iter_as_bool(&it)) &&
               (key_may_change(s) || mig_in_range(s, &o));
    else
        return;
    const char *path = strcmp(op, "u") == 0 ? "o2._id" : "o._id";
    if (mine && bson_iter_init(&it, e) && bson_iter_find_descendant(&it, path, &sub))
        ids_add(ids, bson_iter_value(&sub));
}

/* Read the oplog after the last entry read (through its ts key: a seek,
 * not a scan of the whole oplog), collecting the range's changed _ids;
 * *morep when a limit stopped the read before the oplog's end. */
static int read_mods(sbl_session_t *ss, id_list_t *ids, bool *morep, sbl_err_t *err)
{
    sbl_coll_t *oplog = NULL;
    sbl_scan_t *scan = NULL;
    *morep = false;
    SBL_RET(sbl_coll_open(ss, SBL_OPLOG_NS, false, &oplog, NULL, err));
    bson_value_t lo = {.value_type = BSON_TYPE_TIMESTAMP};
    lo.value.v_timestamp.timestamp = donor.mods_t;
    lo.value.v_timestamp.increment = donor.mods_i;
    /* the oplog's oldest entry must not be past the last one read (or the
     * position noted at the start), or changes may have been lost to the
     * capped oplog's truncation: an error, the migration aborts */
    int rc = sbl_scan_open(ss, oplog, NULL, false, &scan, err);
    bson_t e;
    bson_iter_t ts;
    bool done = false;
    if (rc == 0 && (rc = sbl_scan_next(scan, &e, &done, err)) == 0 && !done &&
        bson_iter_init_find(&ts, &e, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&ts)) {
        uint32_t t, i;
        bson_iter_timestamp(&ts, &t, &i);
        if (t > donor.mods_t || (t == donor.mods_t && i > donor.mods_i))
            rc = sbl_err_set(err, SBL_E_OperationFailed, "the oplog rolled over during the "
                             "migration: the range's changes since %u:%u are gone",
                             (unsigned)donor.mods_t, (unsigned)donor.mods_i);
    }
    if (scan != NULL)
        sbl_scan_close(scan);
    scan = NULL;
    sbl_scan_bounds_t b = {.lo = &lo, .lo_inclusive = false};
    if (rc == 0)
        rc = sbl_scan_open(ss, oplog, &b, false, &scan, err);
    for (int n = 0; rc == 0; n++) {
        done = false;
        if (n == MODS_SCAN || ids->n >= MODS_ENTRIES) {
            *morep = true;
            break;
        }
        if ((rc = sbl_scan_next(scan, &e, &done, err)) != 0 || done)
            break;
        if (bson_iter_init_find(&ts, &e, "ts") && BSON_ITER_HOLDS_TIMESTAMP(&ts))
            bson_iter_timestamp(&ts, &donor.mods_t, &donor.mods_i);
        /* a prepared transaction's changes count at its commit (the
         * prepare entry holds them), never at its prepare or abort */
        bson_t po, prep;
        bool found = false;
        sbl_err_t perr = {0};
        int kind = sbl_repl_prepared_kind(&e, &po);
        if (kind == SBL_PREP_NONE)
            entry_id(ss, &donor.spec, &e, ids);
        else if (kind == SBL_PREP_COMMIT &&
                 (rc = sbl_repl_prepare_entry_of(ss, &e, &prep, &found, &perr)) == 0 && found) {
            entry_id(ss, &donor.spec, &prep, ids);
            bson_destroy(&prep);
        } else if (rc != 0) {
            *err = perr;
        }
    }
    if (scan != NULL)
        sbl_scan_close(scan);
    sbl_coll_release(oplog);
    return rc;
}

/* The range's changes since the last call: {reload: [docs], deleted:
 * [{_id}], more: bool} (more: call again at once, the oplog was not read
 * to its end). */
int sbl_cmd_transfer_mods(sbl_opctx_t *ctx, sbl_err_t *err)
{
    pthread_mutex_lock(&donor_mu);
    int rc = donor.active ? mig_check_session(ctx->cmd, donor.session, err)
                          : sbl_err_set(err, SBL_E_ConflictingOperationInProgress,
                                        "no migration is active on this shard");
    id_list_t ids = {0};
    bool more = false;
    if (rc == 0)
        rc = read_mods(ctx->ss, &ids, &more, err);
    bson_t reload, deleted;
    uint32_t nr = 0, nd = 0;
    char kb[16], db[256];
    const char *coll;
    mig_split_ns(donor.spec.ns, db, sizeof(db), &coll);
    bool *reloaded = calloc(ids.n + 1, sizeof(bool));
    BSON_APPEND_ARRAY_BEGIN(ctx->reply, "reload", &reload);
    for (size_t i = 0; rc == 0 && i < ids.n; i++) {
        bson_t cmd = BSON_INITIALIZER, f, reply;
        BSON_APPEND_UTF8(&cmd, "find", coll);
        BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &f);
        sbl_append_value(&f, "_id", 3, &ids.v[i]);
        bson_append_document_end(&cmd, &f);
        BSON_APPEND_INT32(&cmd, "limit", 1);
        BSON_APPEND_BOOL(&cmd, "singleBatch", true);
        rc = sbl_cmd_run_checked(db, &cmd, &reply, err);
        bson_destroy(&cmd);
        bson_iter_t it;
        bson_t d;
        if (rc == 0 && bson_iter_init(&it, &reply) &&
            bson_iter_find_descendant(&it, "cursor.firstBatch.0", &it) && sbl_iter_doc(&it, &d) &&
            mig_in_range(&donor.spec, &d)) {
            const char *k461 = mig_akey(nr++, kb);
            BSON_APPEND_DOCUMENT(&reload, k461, &d);
            reloaded[i] = true;
        }
        bson_destroy(&reply);
    }
    bson_append_array_end(ctx->reply, &reload);
    BSON_APPEND_ARRAY_BEGIN(ctx->reply, "deleted", &deleted);
    for (size_t i = 0; rc == 0 && i < ids.n; i++) {
        if (reloaded[i])
            continue;
        bson_t d;
        const char *k472 = mig_akey(nd++, kb);
        BSON_APPEND_DOCUMENT_BEGIN(&deleted, k472, &d);
        sbl_append_value(&d, "_id", 3, &ids.v[i]);
        bson_append_document_end(&deleted, &d);
    }
    bson_append_array_end(ctx->reply, &deleted);
    BSON_APPEND_BOOL(ctx->reply, "more", more);
    donor.mods += nr + nd;
    pthread_mutex_unlock(&donor_mu);
    free(reloaded);
    ids_free(&ids);
    return rc;
}

int mig_await_majority(int64_t timeout_ms, const char *what, sbl_err_t *err)
{
    /* the newest entry this thread wrote, or the newest committed one if
     * later: with parallel commits the latter may be below the former */
    char msg[256];
    uint64_t ts = sbl_repl_last_op_ts(), mine = sbl_repl_take_thread_op_ts();
    if (mine > ts)
        ts = mine;
    int code = sbl_cmd_await_replication(ts, 1, true, timeout_ms, msg, sizeof(msg));
    if (code != 0)
        return sbl_err_set(err, code, "%s: %s", what, msg);
    /* and in the stable timestamp, where majority reads read: it trails the
     * commit point a little (sbl_rs_publish_stable_locked), or more while a
     * prepared transaction holds it back; then no more than a second */
    for (int i = 0; i < 500 && sbl_repl_enabled() && sbl_storage_stable_ts() < ts; i++)
        usleep(2000);
    return 0;
}

bool mig_donor_active(void)
{
    return donor.active;
}

int mig_donor_spec(const bson_t *cmd, mig_spec_t *out, sbl_err_t *err)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&donor_mu);
    int rc = donor.active ? mig_check_session(cmd, donor.session, err)
                          : sbl_err_set(err, SBL_E_ConflictingOperationInProgress,
                                        "no migration is active on this shard");
    if (rc == 0) {
        *out = donor.spec;
        out->key = bson_copy(donor.spec.key);
        out->min = bson_copy(donor.spec.min);
        out->max = bson_copy(donor.spec.max);
    }
    pthread_mutex_unlock(&donor_mu);
    return rc;
}

static void donor_end(void)
{
    pthread_mutex_lock(&donor_mu);
    if (donor.cursor != 0) {
        char db[256];
        const char *coll;
        mig_split_ns(donor.spec.ns, db, sizeof(db), &coll);
        mig_kill_cursor(db, coll, donor.cursor);
    }
    mig_spec_free(&donor.spec);
    memset(&donor, 0, sizeof(donor));
    mig_update_active_flag();
    pthread_mutex_unlock(&donor_mu);
}

int mig_recip_call(const char *host, const char *name, const char *session, const bson_t *extra,
                   bson_t *reply, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&cmd, name, session);
    BSON_APPEND_UTF8(&cmd, "sessionId", session);
    if (extra != NULL)
        bson_concat(&cmd, extra);
    int rc = sbl_shard_remote_check_within(host, "admin", &cmd, MIG_CALL_MS, reply, err);
    bson_destroy(&cmd);
    return rc;
}

/* Which shard config.chunks says owns the chunk starting at min (into out). */
/* The config servers' chunk of ns starting at min, into *chunk (initialised
 * when true). */
static bool chunk_doc(const char *cfg, const char *ns, const bson_t *min, bson_t *chunk)
{
    bson_t cmd = BSON_INITIALIZER, f, reply;
    sbl_err_t e = {0};
    BSON_APPEND_UTF8(&cmd, "find", "collections");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &f);
    BSON_APPEND_UTF8(&f, "_id", ns);
    bson_append_document_end(&cmd, &f);
    bson_value_t uuid = {0};
    bson_iter_t it;
    if (sbl_shard_remote_check(cfg, "config", &cmd, &reply, &e) == 0 &&
        bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.firstBatch.0.uuid", &it))
        bson_value_copy(bson_iter_value(&it), &uuid);
    bson_destroy(&reply);
    bson_destroy(&cmd);
    if (uuid.value_type == BSON_TYPE_EOD)
        return false;
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "find", "chunks");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &f);
    sbl_append_value(&f, "uuid", 4, &uuid);
    BSON_APPEND_DOCUMENT(&f, "min", min);
    bson_append_document_end(&cmd, &f);
    bson_t d;
    bool found = sbl_shard_remote_check(cfg, "config", &cmd, &reply, &e) == 0 &&
                 bson_iter_init(&it, &reply) &&
                 bson_iter_find_descendant(&it, "cursor.firstBatch.0", &it) &&
                 sbl_iter_doc(&it, &d);
    if (found)
        bson_copy_to(&d, chunk);
    bson_destroy(&reply);
    bson_destroy(&cmd);
    bson_value_destroy(&uuid);
    return found;
}

/* Have the config servers give ns's chunk (its document: chunk) a new
 * major version unless it changed since (w: majority). */
static int chunk_bump(const char *cfg, const char *ns, const bson_t *chunk, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, mn, mx, reply;
    bson_iter_t lm;
    if (!mig_doc_of(chunk, "min", &mn) || !mig_doc_of(chunk, "max", &mx) ||
        !bson_iter_init_find(&lm, chunk, "lastmod")) {
        bson_destroy(&cmd);
        return sbl_err_set(err, SBL_E_BadValue, "a config.chunks document without min, max "
                           "or lastmod");
    }
    BSON_APPEND_INT32(&cmd, "_configsvrEnsureChunkVersionIsGreaterThan", 1);
    BSON_APPEND_UTF8(&cmd, "nss", ns);
    BSON_APPEND_DOCUMENT(&cmd, "minKey", &mn);
    BSON_APPEND_DOCUMENT(&cmd, "maxKey", &mx);
    sbl_append_value(&cmd, "version", -1, bson_iter_value(&lm));
    append_wc_majority(&cmd);
    int rc = sbl_shard_remote_check(cfg, "admin", &cmd, &reply, err);
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return rc;
}

void mig_chunk_owner(const char *cfg, const char *ns, const bson_t *min, const char *to,
                     char *out, size_t n)
{
    bson_t chunk;
    sbl_err_t e = {0};
    out[0] = '\0';
    if (!chunk_doc(cfg, ns, min, &chunk))
        return;
    const char *owner = sbl_doc_utf8(&chunk, "shard");
    if (owner != NULL && to != NULL && strcmp(owner, to) != 0) {
        /* an abort: first no commit of the migration may land any more */
        owner = NULL;
        if (chunk_bump(cfg, ns, &chunk, &e) != 0) {
            mig_log("migration of %s: the config servers did not bump the chunk's version "
                    "(%s): its outcome is decided later", ns, e.msg);
        } else {
            bson_destroy(&chunk);
            if (!chunk_doc(cfg, ns, min, &chunk))
                return;
            owner = sbl_doc_utf8(&chunk, "shard");
        }
    }
    bson_iter_t it;
    if (owner != NULL && bson_iter_init(&it, &chunk) &&
        bson_iter_find_descendant(&it, "history.0.validAfter", &it) &&
        BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        /* a window of the migration that closes after this (recovery, the
         * recipient's watchdog) closes after its commit: mig_crit_done */
        uint32_t t, i;
        bson_iter_timestamp(&it, &t, &i);
        sbl_repl_clock_advance(((uint64_t)t << 32) | i);
    }
    if (owner != NULL)
        snprintf(out, n, "%s", owner);
    bson_destroy(&chunk);
}

/* Poll the recipient until it reports "steady".  An error when it fails,
 * when its counts stop moving for MIG_STALL_MS, or when it has not caught
 * up MIG_CATCHUP_MS after its clone: the migration then aborts rather than
 * wait on (a write load it cannot overtake must not keep it forever). */
static int await_steady(const char *to_host, const char *session, sbl_err_t *err)
{
    int64_t progress_at = mig_now_ms(), catchup_at = 0, last_count = -1;
    for (;;) {
        bson_t reply;
        int rc = mig_recip_call(to_host, "_recvChunkStatus", session, NULL, &reply, err);
        if (rc != 0) {
            bson_destroy(&reply);
            return rc;
        }
        const char *state = sbl_doc_utf8(&reply, "state");
        const char *m = sbl_doc_utf8(&reply, "errmsg");
        bson_iter_t it;
        int64_t count = 0;
        if (bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "counts.cloned", &it))
            count += bson_iter_as_int64(&it);
        if (bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "counts.catchup", &it))
            count += bson_iter_as_int64(&it);
        if (state == NULL)
            rc = sbl_err_set(err, SBL_E_OperationFailed, "the recipient no longer runs the "
                             "migration");
        else if (strcmp(state, "fail") == 0)
            rc = sbl_err_set(err, SBL_E_OperationFailed, "the recipient failed: %s",
                             m ? m : "error");
        bool steady = rc == 0 && strcmp(state, "steady") == 0;
        if (rc == 0 && strcmp(state, "catchup") == 0 && catchup_at == 0)
            catchup_at = mig_now_ms();
        bson_destroy(&reply);
        if (rc != 0 || steady)
            return rc;
        int64_t now = mig_now_ms();
        if (count != last_count) {
            last_count = count;
            progress_at = now;
        }
        if (now - progress_at > MIG_STALL_MS)
            return sbl_err_set(err, SBL_E_ExceededTimeLimit, "the recipient made no progress "
                               "for %d s (state %s): migration aborted", MIG_STALL_MS / 1000,
                               state);
        if (catchup_at != 0 && now - catchup_at > MIG_CATCHUP_MS)
            return sbl_err_set(err, SBL_E_ExceededTimeLimit, "the recipient did not catch up "
                               "with the writes to the range within %d s of its clone: "
                               "migration aborted", MIG_CATCHUP_MS / 1000);
        usleep(20 * 1000);
    }
}

/* The config servers' commit of the new owner; on a lost answer (or one
 * a majority did not confirm) they are asked who owns the chunk, for up to
 * a minute.  0: committed; *unknownp when nobody could say. */
/* The config servers give the chunk to shard to.  *validp: the commit's
 * validAfter, which the donor asks for (later than every change the
 * migration made so far on either shard: the recipient's move-in) and the
 * config servers answer with (they may take a later one). */
static int config_commit(const mig_spec_t *spec, const char *to, const bson_value_t *version,
                         uint64_t *validp, bool *unknownp, sbl_err_t *err)
{
    const char *cfg = sbl_shard_configsvr();
    bson_t c2 = BSON_INITIALIZER, mc, reply;
    BSON_APPEND_UTF8(&c2, "_configsvrCommitChunkMigration", spec->ns);
    BSON_APPEND_UTF8(&c2, "fromShard", sbl_shard_name());
    BSON_APPEND_UTF8(&c2, "toShard", to);
    BSON_APPEND_DOCUMENT_BEGIN(&c2, "migratedChunk", &mc);
    BSON_APPEND_DOCUMENT(&mc, "min", spec->min);
    BSON_APPEND_DOCUMENT(&mc, "max", spec->max);
    if (version->value_type == BSON_TYPE_TIMESTAMP)
        sbl_append_value(&mc, "lastmod", -1, version);
    bson_append_document_end(&c2, &mc);
    bson_append_timestamp(&c2, "validAfter", -1, (uint32_t)(*validp >> 32), (uint32_t)*validp);
    append_wc_majority(&c2);
    /* a donor that stepped down leaves the decision to its new primary's
     * recovery: it must not commit behind its back */
    int rc;
    if (sbl_repl_writable()) {
        rc = sbl_shard_remote_check(cfg, "admin", &c2, &reply, err);
        bson_iter_t it;
        if (rc == 0 && bson_iter_init_find(&it, &reply, "validAfter") &&
            BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            uint32_t t, i;
            bson_iter_timestamp(&it, &t, &i);
            *validp = ((uint64_t)t << 32) | i;
        }
        bson_destroy(&reply);
    } else {
        rc = sbl_err_set(err, SBL_E_NotWritablePrimary, "this donor is no longer primary: "
                         "the migration is aborted");
    }
    bson_destroy(&c2);
    if (rc != 0 && rc != SBL_E_ConflictingOperationInProgress && rc != SBL_E_NotWritablePrimary &&
        rc != SBL_E_NamespaceNotSharded && rc != SBL_E_BadValue) {
        /* the connection went, or the commit was not confirmed by a
         * majority: did it commit?  The config servers know: ask them
         * (for up to a minute, still in the critical section). */
        char owner[128] = "";
        for (int i = 0; i < 60 && owner[0] == '\0'; i++) {
            mig_chunk_owner(cfg, spec->ns, spec->min, to, owner, sizeof(owner));
            if (owner[0] == '\0')
                sleep(1);
        }
        if (strcmp(owner, to) == 0)
            rc = 0;
        else if (owner[0] == '\0')
            *unknownp = true;
    }
    return rc;
}

/* No transaction that wrote ns on this shard may end after the recipient
 * took the range's last changes: its writes to the range would stay here
 * and go with the range deletion (a transfer lost).  mongod's critical
 * section waits for the collection's transactions (its exclusive lock);
 * here idle ones in progress are aborted (their next statement would meet
 * the critical section, then StaleConfig) and prepared ones, which only
 * their coordinator ends, are waited for at most MIG_TXN_WAIT_MS; then the
 * migration aborts and leaves the critical section. */
static int await_txns(const char *ns, sbl_err_t *err)
{
    int64_t until = mig_now_ms() + MIG_TXN_WAIT_MS;
    int left;
    while ((left = sbl_cmd_mtxn_end_writers(ns)) > 0 && mig_now_ms() < until)
        usleep(5 * 1000);
    if (left == 0)
        return 0;
    return sbl_err_set(err, SBL_E_ExceededTimeLimit, "%d transaction(s) that wrote %s on the "
                       "donor did not end within %d ms of its critical section (prepared: "
                       "waiting for their coordinator's decision)", left, ns, MIG_TXN_WAIT_MS);
}

/* A reply's $clusterTime (0: none). */
static uint64_t reply_cluster_time(const bson_t *reply)
{
    bson_iter_t it;
    uint32_t t = 0, i = 0;
    if (bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, "$clusterTime.clusterTime", &it) &&
        BSON_ITER_HOLDS_TIMESTAMP(&it))
        bson_iter_timestamp(&it, &t, &i);
    return ((uint64_t)t << 32) | i;
}

/* Tell the recipient the decision; then the coordinator document goes
 * (else recovery sends it again). */
static void announce(const char *to_host, const char *session, bool committed,
                     uint64_t valid_after)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    sbl_err_t e = {0};
    BSON_APPEND_UTF8(&cmd, committed ? "_recvChunkReleaseCritSec" : "_recvChunkAbort", session);
    BSON_APPEND_UTF8(&cmd, "sessionId", session);
    if (committed) /* its window of the migration closes after the commit (mig_crit_done) */
        bson_append_timestamp(&cmd, "validAfter", -1, (uint32_t)(valid_after >> 32),
                              (uint32_t)valid_after);
    int rc = sbl_shard_remote_check_within(to_host, "admin", &cmd, MIG_CALL_MS, &reply, &e);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    if (rc == 0)
        rc = mig_coord_delete(session, &e);
    if (rc != 0) {
        mig_log("migration %s: the recipient did not hear the decision (%s): recovery tells "
                "it again", session, e.msg);
        mig_recovery_kick();
    }
}

int sbl_cmd_shardsvr_move_range(sbl_opctx_t *ctx, sbl_err_t *err)
{
    sbl_cmd_shard_identity_load(); /* elected after addShard, before recovery read it */
    if (sbl_server_options()->cluster_role != SBL_ROLE_SHARDSVR || sbl_shard_name() == NULL)
        return sbl_err_set(err, SBL_E_IllegalOperation, "_shardsvrMoveRange needs a shard "
                           "that belongs to a cluster");
    const char *to = sbl_doc_utf8(ctx->cmd, "toShard"), *to_host = sbl_doc_utf8(ctx->cmd, "toShardHost");
    const char *from_host = sbl_doc_utf8(ctx->cmd, "fromShardHost");
    if (to == NULL || to_host == NULL || from_host == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "_shardsvrMoveRange needs toShard, toShardHost "
                           "and fromShardHost");
    mig_spec_t spec;
    int rc = mig_spec_parse(ctx->cmd, &spec, err);
    if (rc != 0)
        return rc;
    /* the chunk's version as the migration begins: the commit names it, so
     * one that arrives after a recovered abort (which bumps it) is refused */
    bson_value_t version = {0};
    bson_iter_t vit;
    if (bson_iter_init_find(&vit, ctx->cmd, "chunkVersion"))
        version = *bson_iter_value(&vit);
    pthread_mutex_lock(&donor_mu);
    if (donor.active || mig_recip_active() || mig_recovery_pending() || mig_leftovers()) {
        pthread_mutex_unlock(&donor_mu);
        mig_spec_free(&spec);
        return sbl_err_set(err, SBL_E_ConflictingOperationInProgress, "a migration is already "
                           "running on this shard, or an earlier one is being recovered");
    }
    memset(&donor, 0, sizeof(donor));
    donor.active = true;
    donor.spec = spec;
    bson_oid_t sid;
    bson_oid_init(&sid, NULL);
    char sidhex[25];
    bson_oid_to_string(&sid, sidhex);
    snprintf(donor.session, sizeof(donor.session), "%s_%s_%s", sbl_shard_name(), to, sidhex);
    uint64_t ts = sbl_repl_last_op_ts();
    donor.mods_t = (uint32_t)(ts >> 32);
    donor.mods_i = (uint32_t)ts;
    mig_update_active_flag();
    char session[160];
    snprintf(session, sizeof(session), "%s", donor.session);
    pthread_mutex_unlock(&donor_mu);

    int64_t t0 = mig_now_ms(), t_steady = 0, t_cs = 0, t_cs_end = 0, t_commit = 0;
    bool in_cs = false, committed = false, recip_started = false, unknown = false;
    bson_t reply;
    /* 0. the decision document and this shard's pending range deletion
     *    task, durable before the recipient hears of the migration */
    uint8_t mig_id[16];
    bson_iter_t wit; /* moveChunk's _waitForDelete: the deletion before the answer, at once */
    bool wait_delete = bson_iter_init_find(&wit, ctx->cmd, "waitForDelete") &&
                       bson_iter_as_bool(&wit);
    rc = mig_persist_start(&spec, session, to, to_host, wait_delete, mig_id, err);
    bool persisted = rc == 0;
    if (!persisted)
        mig_recovery_kick(); /* whatever was written: recovery aborts it */
    mig_fp_hold(MIG_FP_STEP1);
    /* 1. the recipient starts pulling */
    bson_t cmd = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&cmd, "_recvChunkStart", spec.ns);
    BSON_APPEND_UTF8(&cmd, "sessionId", session);
    bson_append_binary(&cmd, "migrationId", -1, BSON_SUBTYPE_UUID, mig_id, 16);
    BSON_APPEND_UTF8(&cmd, "from", from_host);
    BSON_APPEND_UTF8(&cmd, "fromShardName", sbl_shard_name());
    BSON_APPEND_UTF8(&cmd, "toShardName", to);
    BSON_APPEND_DOCUMENT(&cmd, "min", spec.min);
    BSON_APPEND_DOCUMENT(&cmd, "max", spec.max);
    BSON_APPEND_DOCUMENT(&cmd, "shardKeyPattern", spec.key);
    if (rc == 0) {
        rc = sbl_shard_remote_check_within(to_host, "admin", &cmd, MIG_CALL_MS, &reply, err);
        bson_destroy(&reply);
        recip_started = rc == 0;
    }
    bson_destroy(&cmd);
    /* 2. wait until it has cloned and caught up (bounded: see migrate_int.h) */
    if (rc == 0) {
        mig_fp_hold(MIG_FP_STEP2);
        rc = await_steady(to_host, session, err);
    }
    t_steady = mig_now_ms();
    /* 3. critical section; the recipient takes the last changes */
    if (rc == 0) {
        mig_fp_hold(MIG_FP_STEP3);
        int64_t deadline = sbl_now_us() + (int64_t)MIG_CRIT_MS * 1000;
        mig_crit_note(spec.ns); /* before anything changes: snapshot_read.c */
        rc = sbl_shard_crit_enter(spec.ns, deadline, err);
        in_cs = rc == 0;
        t_cs = mig_now_ms();
    }
    if (rc == 0)
        rc = await_txns(spec.ns, err);
    uint64_t valid_after = 0; /* the commit's time: after every change made so far */
    if (rc == 0) {
        rc = mig_recip_call(to_host, "_recvChunkCommit", session, NULL, &reply, err);
        valid_after = reply_cluster_time(&reply);
        bson_destroy(&reply);
    }
    /* 4. the config servers commit the new owner */
    if (rc == 0) {
        mig_fp_hold(MIG_FP_STEP4);
        if (valid_after < sbl_repl_clock_now())
            valid_after = sbl_repl_clock_now();
        valid_after++;
        rc = config_commit(&spec, to, &version, &valid_after, &unknown, err);
        committed = rc == 0;
        t_commit = mig_now_ms();
        if (committed) /* the deletion below comes after it */
            sbl_repl_clock_advance(valid_after);
    }
    /* 5. the decision is recorded and this shard's task handed to the range
     *    deleter (migrate_rangedel.c), which deletes the range in the
     *    background after orphanCleanupDelaySecs; this shard re-reads its
     *    version, whose ownership filter hides the range from routed reads
     *    and writes from now on, and leaves the critical section */
    int64_t deleted = 0;
    if (committed) {
        mig_fp_hold(MIG_FP_STEP5);
        sbl_err_t e = {0};
        bool ready = mig_persist_decision(session, true, &e) == 0 &&
                     mig_task_ready(session, &e) == 0;
        if (!ready)
            mig_log("migration %s: recording the commit failed: %s", session, e.msg);
        /* the new version before the critical section ends: with the old
         * one cached, the filter would still take the range for this
         * shard's (the config servers just answered: a retry is short) */
        for (int i = 0; sbl_shard_refresh(spec.ns, &e) != 0 && i < MIG_CRIT_MS / 500; i++)
            usleep(500 * 1000);
        if (!ready) {
            mig_recovery_take_crit(spec.ns); /* recovery records it first */
        } else {
            sbl_shard_crit_exit(); /* this shard's version is the new one now */
            mig_crit_done(spec.ns);
            mig_fp_hold(MIG_FP_STEP6);
        }
        t_cs_end = mig_now_ms();
        in_cs = false;
        announce(to_host, session, true, valid_after);
        if (ready && wait_delete) {
            deleted = mig_rangedel_run_now(session, &e);
            if (deleted < 0) /* the service tries again */
                mig_log("migration %s: deleting the donor's copy of the range: %s", session,
                        e.msg);
        }
        mig_rangedel_kick();
        rc = 0;
    } else if (unknown) {
        /* the outcome is unknown: recovery asks the config servers again
         * and settles both shards' copies; until then this shard holds the
         * critical section (the recipient holds its own) */
        mig_log("migration %s: the config servers could not say whether the commit happened; "
                "recovery settles it when they can", session);
        mig_recovery_take_crit(spec.ns);
        in_cs = false;
    } else if (persisted) {
        sbl_err_t e = {0};
        if (mig_persist_decision(session, false, &e) != 0 || mig_task_delete(session, &e) != 0)
            mig_log("migration %s: recording the abort failed: %s", session, e.msg);
        if (recip_started) {
            announce(to_host, session, false, 0);
        } else if (mig_coord_delete(session, &e) != 0) {
            mig_recovery_kick();
        }
    }
    if (in_cs) {
        sbl_shard_crit_exit();
        mig_crit_done(spec.ns);
    }
    pthread_mutex_lock(&donor_mu);
    int64_t cloned = donor.cloned, mods = donor.mods;
    pthread_mutex_unlock(&donor_mu);
    donor_end();
    if (rc != 0)
        return rc;
    BSON_APPEND_INT64(ctx->reply, "cloned", cloned);
    BSON_APPEND_INT64(ctx->reply, "catchup", mods);
    BSON_APPEND_INT64(ctx->reply, "deleted", deleted);
    BSON_APPEND_INT64(ctx->reply, "millisClone", t_steady - t0);
    BSON_APPEND_INT64(ctx->reply, "millisCriticalSection", t_cs_end - t_cs);
    BSON_APPEND_INT64(ctx->reply, "millisCommit", t_commit - t_cs);
    BSON_APPEND_INT64(ctx->reply, "millis", mig_now_ms() - t0);
    return 0;
}
