/*
 * backup_cmds.c: hot backup as mongod exposes it: the $backupCursor
 * aggregation stage (aggregate: 1 on admin, the first and only stage), and
 * fsync {lock: true} / fsyncUnlock.
 *
 * $backupCursor opens a storage backup (src/storage/wt_backup.c) and serves
 * a cursor: first {metadata: {...}}, then one {filename, fileSize} per file
 * to copy.  The cursor is tailable: it stays registered after its last
 * document (getMore answers an empty batch and keeps it alive) and the
 * backup stays open until killCursors, the cursor reaper (10 idle minutes)
 * or shutdown frees it.
 *
 * fsync lock: a checkpoint, then a hold on the files (a backup cursor, as
 * mongod takes one) and a lock count; while the count is above zero every
 * write command waits in the dispatcher (sbl_cmd_fsync_wait, on a worker
 * thread: sbl_cmd_fsync_locked sends writes there) and reads run.
 */
#include "cmd/cmd_int.h"
#include "common/clock.h"
#include "exec/exec.h"
#include "repl/repl.h"
#include "storage/storage.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* ---- $backupCursor ------------------------------------------------------------ */

typedef struct bk_state {
    sbl_backup_t *b;
    bson_t meta;
    size_t next; /* 0: the metadata; i + 1: file i */
} bk_state_t;

static int bk_next(void *state, sbl_opctx_t *ctx, bson_t *doc, bool *donep, sbl_err_t *err)
{
    bk_state_t *s = state;
    (void)ctx, (void)err;
    bson_init(doc);
    if (s->next == 0) {
        BSON_APPEND_DOCUMENT(doc, "metadata", &s->meta);
    } else if (s->next - 1 < sbl_backup_nfiles(s->b)) {
        int64_t size;
        const char *rel = sbl_backup_file(s->b, s->next - 1, &size);
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", sbl_storage_dbpath(), rel);
        BSON_APPEND_UTF8(doc, "filename", path);
        BSON_APPEND_INT64(doc, "fileSize", size);
    } else {
        *donep = true;
        return 0;
    }
    s->next++;
    return 0;
}

static void bk_free(void *state)
{
    bk_state_t *s = state;
    sbl_backup_close(s->b);
    bson_destroy(&s->meta);
    free(s);
}

static const sbl_cursor_source_t bk_source = {.next = bk_next, .free = bk_free};

/* The oplog's first (dir 1) or last (dir -1) entry's {ts, t} appended as key; false
 * when there is none. */
static bool oplog_edge(sbl_opctx_t *ctx, int dir, bson_t *meta, const char *key)
{
    bson_t sort = BSON_INITIALIZER, doc;
    sbl_qexec_opts_t o = {0};
    sbl_qexec_t *q = NULL;
    sbl_err_t err;
    bool done = true, found = false;
    BSON_APPEND_INT32(&sort, "$natural", dir);
    o.sort = &sort;
    o.limit = 1;
    if (sbl_qexec_new(SBL_OPLOG_NS, &o, &q, &err) == 0 &&
        sbl_qexec_next(q, ctx, &doc, NULL, &done, &err) == 0 && !done) {
        bson_iter_t it;
        bson_t sub;
        BSON_APPEND_DOCUMENT_BEGIN(meta, key, &sub);
        if (bson_iter_init_find(&it, &doc, "ts"))
            sbl_append_iter(&sub, "ts", 2, &it);
        if (bson_iter_init_find(&it, &doc, "t"))
            sbl_append_iter(&sub, "t", 1, &it);
        bson_append_document_end(meta, &sub);
        bson_destroy(&doc);
        found = true;
    }
    sbl_qexec_free(q);
    bson_destroy(&sort);
    return found;
}

int sbl_cmd_backup_cursor(sbl_opctx_t *ctx, const bson_t *spec, int64_t batch_size,
                          sbl_err_t *err)
{
    static const char *const fields[] = {"incrementalBackup", "thisBackupName", "srcBackupName",
                                         "disableIncrementalBackup", "blockSize", NULL};
    sbl_backup_opts_t o = {0};
    bson_iter_t it;

    if (strcmp(ctx->db, "admin") != 0)
        return sbl_err_set(err, SBL_E_InvalidNamespace,
                           "$backupCursor must be run against the 'admin' database with "
                           "{aggregate: 1}");
    SBL_RET(sbl_cmd_auth_require(ctx, "fsync", NULL, NULL, err)); /* mongod's privilege */
    if (!bson_iter_init(&it, spec))
        return sbl_err_set(err, SBL_E_BadValue, "invalid $backupCursor specification");
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        size_t i;
        for (i = 0; fields[i] != NULL && strcmp(fields[i], k) != 0; i++)
            ;
        if (fields[i] == NULL)
            return sbl_err_set(err, 40415, "BSON field '$backupCursorOptions.%s' is an unknown "
                                           "field.", k);
        if (i == 0 || i == 3) {
            if (!BSON_ITER_HOLDS_BOOL(&it))
                return sbl_type_error(err, k, &it, "bool");
            if (i == 0)
                o.incremental = bson_iter_bool(&it);
            else
                o.disable_incremental = bson_iter_bool(&it);
        } else if (i == 1 || i == 2) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return sbl_type_error(err, k, &it, "string");
            if (i == 1)
                o.this_name = bson_iter_utf8(&it, NULL);
            else
                o.src_name = bson_iter_utf8(&it, NULL);
        }
    }
    if (o.disable_incremental && o.incremental)
        return sbl_err_set(err, SBL_E_BadValue,
                           "Cannot have both disableIncrementalBackup and incrementalBackup");

    /* bk_state_t embeds a bson_t, which asks for 128-byte alignment (malloc gives 16). */
    bk_state_t *s = aligned_alloc(128, (sizeof(*s) + 127) & ~(size_t)127);
    if (s == NULL)
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory for a backup cursor");
    memset(s, 0, sizeof(*s));
    bson_init(&s->meta);
    /* A replica set member: the oplog's span the copy holds.  Its last entry is read
     * before the backup opens and is in the journal by then (flushed here), so the
     * copy replays at least to it. */
    bson_t oplog = BSON_INITIALIZER;
    if (sbl_repl_enabled() && oplog_edge(ctx, 1, &oplog, "oplogStart") &&
        oplog_edge(ctx, -1, &oplog, "oplogEnd"))
        sbl_storage_flush(NULL);
    int rc = sbl_backup_open(&o, &s->b, err);
    if (rc != 0) {
        bson_destroy(&oplog);
        bson_destroy(&s->meta);
        free(s);
        return rc;
    }
    uint8_t id[16];
    if (getrandom(id, sizeof(id), 0) != (ssize_t)sizeof(id))
        memset(id, 0, sizeof(id));
    id[6] = (uint8_t)((id[6] & 0x0f) | 0x40); /* a version 4 UUID */
    id[8] = (uint8_t)((id[8] & 0x3f) | 0x80);
    bson_append_binary(&s->meta, "backupId", -1, BSON_SUBTYPE_UUID, id, sizeof(id));
    BSON_APPEND_UTF8(&s->meta, "dbpath", sbl_storage_dbpath());
    bson_concat(&s->meta, &oplog);
    bson_destroy(&oplog);
    BSON_APPEND_BOOL(&s->meta, "incrementalBackup", o.incremental);
    BSON_APPEND_BOOL(&s->meta, "disableIncrementalBackup", o.disable_incremental);
    if (o.this_name != NULL)
        BSON_APPEND_UTF8(&s->meta, "thisBackupName", o.this_name);
    if (o.src_name != NULL)
        BSON_APPEND_UTF8(&s->meta, "srcBackupName", o.src_name);
    /* Sable's incremental backups are journal files replayed over the full
     * backup's data files (WiredTiger 3.2): a tool must know to copy them
     * whole over the earlier copy. */
    BSON_APPEND_UTF8(&s->meta, "incrementalKind", "journal");
    return sbl_cursor_first_batch_flags(ctx, "admin.$cmd.aggregate", &bk_source, s, batch_size,
                                        false, SBL_CURSOR_TAILABLE, err);
}

/* ---- fsync lock ------------------------------------------------------------- */

static pthread_mutex_t fs_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fs_cond = PTHREAD_COND_INITIALIZER;
static int fs_count; /* under fs_mutex */
static atomic_bool fs_locked;

bool sbl_cmd_fsync_locked(void)
{
    return atomic_load(&fs_locked);
}

int sbl_cmd_fsync_wait(sbl_opctx_t *ctx, sbl_err_t *err)
{
    int rc = 0;
    pthread_mutex_lock(&fs_mutex);
    while (fs_count > 0 && (rc = sbl_op_check_interrupt(ctx, err)) == 0) {
        struct timespec ts = sbl_deadline_in_ms(50); /* wake to check killOp and maxTimeMS */
        pthread_cond_timedwait(&fs_cond, &fs_mutex, &ts);
    }
    pthread_mutex_unlock(&fs_mutex);
    return rc;
}

int sbl_cmd_fsync(sbl_opctx_t *ctx, sbl_err_t *err)
{
    bson_iter_t it;
    bool lock = bson_iter_init_find(&it, ctx->cmd, "lock") && bson_iter_as_bool(&it);
    SBL_RET(sbl_storage_flush(err));
    SBL_RET(sbl_storage_checkpoint(err));
    BSON_APPEND_INT32(ctx->reply, "numFiles", 1);
    if (!lock)
        return 0;
    pthread_mutex_lock(&fs_mutex);
    int rc = sbl_backup_hold(err);
    if (rc == 0) {
        fs_count++;
        atomic_store(&fs_locked, true);
        BSON_APPEND_UTF8(ctx->reply, "info",
                         "now locked against writes, use db.fsyncUnlock() to unlock");
        BSON_APPEND_INT32(ctx->reply, "lockCount", fs_count);
        BSON_APPEND_UTF8(ctx->reply, "seeAlso",
                         "http://dochub.mongodb.org/core/fsynccommand");
    }
    pthread_mutex_unlock(&fs_mutex);
    return rc;
}

int sbl_cmd_fsync_unlock(sbl_opctx_t *ctx, sbl_err_t *err)
{
    pthread_mutex_lock(&fs_mutex);
    if (fs_count == 0) {
        pthread_mutex_unlock(&fs_mutex);
        return sbl_err_set(err, SBL_E_IllegalOperation, "fsyncUnlock called when not locked");
    }
    fs_count--;
    sbl_backup_release();
    if (fs_count == 0) {
        atomic_store(&fs_locked, false);
        pthread_cond_broadcast(&fs_cond);
    }
    BSON_APPEND_UTF8(ctx->reply, "info", "fsyncUnlock completed");
    BSON_APPEND_INT32(ctx->reply, "lockCount", fs_count);
    pthread_mutex_unlock(&fs_mutex);
    return 0;
}
