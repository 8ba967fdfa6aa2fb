/*
 * wt_compact.c: the compact command's storage side (sbl_coll_compact):
 * WiredTiger's WT_SESSION::compact on every file of one collection.
 *
 * WiredTiger 3.2.1 compacts a live tree: it rewrites the blocks near the end
 * of the file into free space nearer the start and checkpoints so the file
 * can be truncated, taking no lock that stops other sessions' reads and
 * writes (it waits for a running checkpoint instead of failing; EBUSY comes
 * back only while eviction is stuck).  What must stay true: the files are
 * held (table references, index handles) for the whole compaction, so a
 * concurrent drop is only queued, and one compaction runs at a time.
 */
#include "storage/wt_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

#define COMPACT_BUSY_RETRIES 3
/* WiredTiger's compact runs at most a slice per call (it keeps what a
 * timed-out call moved) and the caller's check (killOp, maxTimeMS) runs
 * between calls.  Each call starts with a checkpoint, so a slice that timed
 * out makes the next one twice as long: a file whose checkpoints are slow
 * still progresses, and a kill waits at most COMPACT_SLICE_MAX_S. */
#define COMPACT_SLICE_S 30
#define COMPACT_SLICE_MAX_S 600

/* One compaction at a time: two on the same files would only fight over
 * the same free space and checkpoints. */
static pthread_mutex_t compact_mutex = PTHREAD_MUTEX_INITIALIZER;

/* The file size and the bytes on its free list (reusable space) of uri's
 * file, from WiredTiger's block-manager statistics.  *gonep (0 returned) when
 * the file no longer exists (an index dropped meanwhile). */
static int file_space(WT_SESSION *wt, const char *uri, int64_t *sizep, int64_t *freep,
                      bool *gonep, sbl_err_t *err)
{
    WT_CURSOR *cur;
    char suri[300];
    const char *desc, *pvalue;
    int ret;

    *sizep = *freep = 0;
    *gonep = false;
    snprintf(suri, sizeof(suri), "statistics:%s", uri);
    if ((ret = wt->open_cursor(wt, suri, NULL, "statistics=(fast)", &cur)) == ENOENT) {
        *gonep = true;
        return 0;
    }
    if (ret != 0)
        return sbl_wt_err(err, ret, "compact: file statistics");
    cur->set_key(cur, WT_STAT_DSRC_BLOCK_SIZE);
    if ((ret = cur->search(cur)) == 0)
        ret = cur->get_value(cur, &desc, &pvalue, sizep);
    if (ret == 0) {
        cur->set_key(cur, WT_STAT_DSRC_BLOCK_REUSE_BYTES);
        if ((ret = cur->search(cur)) == 0)
            ret = cur->get_value(cur, &desc, &pvalue, freep);
    }
    cur->close(cur);
    return ret == 0 ? 0 : sbl_wt_err(err, ret, "compact: file statistics");
}

/* Compact one file in slices, calling check between them. */
static int compact_file(WT_SESSION *wt, const char *uri, sbl_compact_check_fn check, void *arg,
                        sbl_err_t *err)
{
    char config[32];
    int ret, busy = 0, slice = COMPACT_SLICE_S;

    for (;;) {
        snprintf(config, sizeof(config), "timeout=%d", slice);
        ret = wt->compact(wt, uri, config);
        if (ret == ETIMEDOUT || (ret == EBUSY && busy++ < COMPACT_BUSY_RETRIES)) {
            int rc;
            if (ret == EBUSY)
                sleep(1);
            else if (slice < COMPACT_SLICE_MAX_S)
                slice = slice * 2 < COMPACT_SLICE_MAX_S ? slice * 2 : COMPACT_SLICE_MAX_S;
            if (check != NULL && (rc = check(arg, err)) != 0)
                return rc;
            continue;
        }
        break;
    }
    if (ret == ENOENT)
        return 0; /* an index dropped meanwhile: nothing to give back */
    if (ret == EBUSY)
        return sbl_err_set(err, SBL_E_Interrupted,
                           "compaction of %s stopped: the WiredTiger cache is under eviction "
                           "pressure; try again later",
                           uri);
    return sbl_wt_err(err, ret, "compact");
}

int sbl_coll_compact(sbl_session_t *s, sbl_coll_t *c, int64_t free_space_target, bool dry_run,
                     sbl_compact_check_fn check, void *arg, int64_t *bytes_freedp,
                     sbl_err_t *err)
{
    sbl_wt_table_t *tbl = c->tbl;
    sbl_index_t **ix = NULL;
    size_t nix = 0, nuris = 0;
    const char **uris = NULL;
    int64_t *before = NULL, freed = 0;
    int rc = 0;

    *bytes_freedp = 0;
    if (s->in_txn)
        return sbl_err_set(err, SBL_E_IllegalOperation, "cannot compact inside a transaction");
    pthread_mutex_lock(&compact_mutex);
    sbl_table_ref(tbl);
    sbl_index_list(c, false, &ix, &nix);
    uris = bson_malloc0((nix + 2) * sizeof(*uris));
    before = bson_malloc0((nix + 2) * sizeof(*before));
    uris[nuris++] = tbl->uri;
    if (sbl_capped_uri(tbl) != NULL)
        uris[nuris++] = sbl_capped_uri(tbl);
    for (size_t i = 0; i < nix; i++)
        uris[nuris++] = sbl_index_uri(ix[i]);

    for (size_t i = 0; i < nuris && !atomic_load(&tbl->dropped); i++) {
        int64_t reusable;
        bool gone;
        SBL_ERR(file_space(s->wt, uris[i], &before[i], &reusable, &gone, err));
    }
    /* Pages freed since the last checkpoint join the free lists only at the next one. */
    SBL_ERR(sbl_storage_checkpoint(err));

    for (size_t i = 0; i < nuris; i++) {
        int64_t size, reusable, after;
        bool gone;
        if (atomic_load(&tbl->dropped))
            break; /* dropped meanwhile: nothing left to give back */
        if (check != NULL)
            SBL_ERR(check(arg, err));
        SBL_ERR(file_space(s->wt, uris[i], &size, &reusable, &gone, err));
        if (gone || reusable < free_space_target || reusable == 0)
            continue;
        if (dry_run) {
            freed += reusable;
            continue;
        }
        SBL_ERR(compact_file(s->wt, uris[i], check, arg, err));
        SBL_ERR(file_space(s->wt, uris[i], &after, &reusable, &gone, err));
        if (!gone && before[i] > after)
            freed += before[i] - after;
    }
    *bytes_freedp = freed;
    if (!dry_run) {
        bson_t attr = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&attr, "namespace", c->ns);
        BSON_APPEND_INT32(&attr, "files", (int32_t)nuris);
        BSON_APPEND_INT64(&attr, "bytesFreed", freed);
        sbl_log(SBL_LOG_INFO, "STORAGE", 20286, "Compact end", &attr);
        bson_destroy(&attr);
    }
err:
    if (rc != 0 && atomic_load(&tbl->dropped))
        rc = sbl_err_set(err, SBL_E_NamespaceNotFound, "collection %s was dropped during compact",
                         c->ns);
    bson_free(uris);
    bson_free(before);
    if (ix != NULL)
        sbl_index_list_free(ix, nix);
    sbl_table_unref(tbl);
    pthread_mutex_unlock(&compact_mutex);
    return rc;
}
