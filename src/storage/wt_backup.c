/*
 * wt_backup.c: hot backup on WiredTiger's backup cursor, and the journal
 * files' removal that goes with it.
 *
 * A backup holds one `backup:` cursor on a session of its own.  While it is
 * open WiredTiger keeps the checkpoint it started from (no block of it is
 * reused, no file is removed), so the files it lists can be copied while
 * writes continue; a copy of them plus the journal files recovers to a
 * consistent state at least as new as the cursor's opening.
 *
 * Incremental backups are journal-based (WiredTiger 3.2 has no block-level
 * incremental backup): after a full backup that starts a chain, a backup
 * with src_name lists only the journal files, and the copy recovers by
 * replaying them on top of the full backup's data files.  So the journal
 * files written since the last backup of a chain must stay: the engine opens
 * WiredTiger with log archival off and removes old journal files itself after
 * each checkpoint (sbl_backup_log_removal), except while a chain is active
 * (the marker file sable.backupChain holds the last backup's name) or a
 * backup is open; closing a backup of a chain removes the journal files it
 * copied and the checkpoint no longer needs.
 *
 * What must stay true: at most one backup is open (WiredTiger's rule too);
 * bk_lock guards the open backup and the chain marker.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "storage/wt_int.h"

#define CHAIN_FILE "sable.backupChain"
#define LOG_PREFIX "WiredTigerLog."

struct sbl_backup {
    WT_SESSION *wt;
    WT_CURSOR *cur;
    uint64_t epoch;
    bool log_only;     /* an incremental backup: journal files only */
    bool truncate_logs; /* on close, remove the journal files the copy made unneeded */
    char **names;      /* paths relative to the dbpath */
    int64_t *sizes;
    size_t n, cap;
};

static pthread_mutex_t bk_lock = PTHREAD_MUTEX_INITIALIZER;
static sbl_backup_t *bk_open; /* the open backup, or NULL */
static int bk_holds;          /* fsync locks' holds on the open backup (sbl_backup_hold) */

static void chain_path(char *path, size_t cap)
{
    snprintf(path, cap, "%s/" CHAIN_FILE, sbl_eng.dbpath);
}

/* The chain's last backup name into buf (empty when no chain). */
static void chain_read(char *buf, size_t cap)
{
    char path[4096];
    chain_path(path, sizeof(path));
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The data files (*.wt but WiredTiger's own) in the dbpath, sorted, one per
 * line (bson_malloc'd). */
static char *data_files(void)
{
    DIR *d = opendir(sbl_eng.dbpath);
    char **v = NULL;
    size_t n = 0, cap = 0, len = 1;
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l < 4 || strcmp(e->d_name + l - 3, ".wt") != 0 ||
            strncmp(e->d_name, "WiredTiger", 10) == 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            v = bson_realloc(v, cap * sizeof(*v));
        }
        v[n++] = bson_strdup(e->d_name);
        len += l + 1;
    }
    if (d != NULL)
        closedir(d);
    if (n > 0)
        qsort(v, n, sizeof(*v), cmp_str);
    char *out = bson_malloc(len), *p = out;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(v[i]);
        memcpy(p, v[i], l);
        p[l] = '\n';
        p += l + 1;
        bson_free(v[i]);
    }
    *p = '\0';
    bson_free(v);
    return out;
}

/* The data files recorded with the chain (after its first line), or NULL. */
static char *chain_files(void)
{
    char path[4096];
    chain_path(path, sizeof(path));
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    sbl_buf_t b;
    sbl_buf_init(&b);
    char chunk[4096];
    size_t k;
    while ((k = fread(chunk, 1, sizeof(chunk), f)) > 0)
        sbl_buf_append(&b, chunk, k);
    fclose(f);
    sbl_buf_append(&b, "", 1);
    char *nl = strchr((char *)b.data, '\n');
    char *out = bson_strdup(nl != NULL ? nl + 1 : "");
    sbl_buf_destroy(&b);
    return out;
}

/* Record name as the chain's last backup, with files (the data files its
 * copy holds); name NULL ends the chain. */
static int chain_write(const char *name, const char *files, sbl_err_t *err)
{
    char path[4096], tmp[4112];
    chain_path(path, sizeof(path));
    if (name == NULL) {
        if (unlink(path) != 0 && errno != ENOENT)
            return sbl_err_set(err, SBL_E_InternalError, "cannot remove %s: %s", path,
                               strerror(errno));
        return 0;
    }
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return sbl_err_set(err, SBL_E_InternalError, "cannot write %s: %s", tmp, strerror(errno));
    bool ok = fprintf(f, "%s\n%s", name, files) > 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) != 0 || !ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return sbl_err_set(err, SBL_E_InternalError, "cannot write %s", path);
    }
    return 0;
}

bool sbl_backup_chain_active(void)
{
    char path[4096];
    chain_path(path, sizeof(path));
    return access(path, F_OK) == 0;
}

void sbl_backup_log_removal(WT_SESSION *wt)
{
    pthread_mutex_lock(&bk_lock);
    if (bk_open == NULL && !sbl_backup_chain_active()) {
        int ret = wt->truncate(wt, "log:", NULL, NULL, NULL);
        if (ret != 0)
            sbl_log(SBL_LOG_WARNING, "STORAGE", 22431, wiredtiger_strerror(ret), NULL);
    }
    pthread_mutex_unlock(&bk_lock);
}

static int add_file(sbl_backup_t *b, const char *rel)
{
    char path[4096];
    struct stat st;
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 32;
        b->names = bson_realloc(b->names, b->cap * sizeof(*b->names));
        b->sizes = bson_realloc(b->sizes, b->cap * sizeof(*b->sizes));
    }
    snprintf(path, sizeof(path), "%s/%s", sbl_eng.dbpath, rel);
    b->names[b->n] = bson_strdup(rel);
    b->sizes[b->n] = stat(path, &st) == 0 ? (int64_t)st.st_size : 0;
    b->n++;
    return 0;
}

static void backup_free(sbl_backup_t *b)
{
    for (size_t i = 0; i < b->n; i++)
        bson_free(b->names[i]);
    bson_free(b->names);
    bson_free(b->sizes);
    bson_free(b);
}

/* Close b's cursor and session (removing journal files first when asked);
 * under bk_lock. */
static void backup_end(sbl_backup_t *b)
{
    if (b->epoch == sbl_eng.epoch && sbl_eng.open && b->wt != NULL) {
        if (b->truncate_logs && b->cur != NULL) {
            int ret = b->wt->truncate(b->wt, "log:", b->cur, NULL, NULL);
            if (ret != 0)
                sbl_log(SBL_LOG_WARNING, "STORAGE", 22432, wiredtiger_strerror(ret), NULL);
        }
        b->wt->close(b->wt, NULL); /* closes the cursor */
    }
    if (bk_open == b)
        bk_open = NULL;
    backup_free(b);
}

int sbl_backup_open(const sbl_backup_opts_t *o, sbl_backup_t **bp, sbl_err_t *err)
{
    char last[256];
    int ret, rc = 0;
    sbl_backup_t *b;

    *bp = NULL;
    if (!sbl_eng.open)
        return sbl_err_set(err, SBL_E_ShutdownInProgress, "storage engine is not open");
    if (o->src_name != NULL && !o->incremental)
        return sbl_err_set(err, SBL_E_BadValue,
                           "srcBackupName requires incrementalBackup: true");
    if (o->incremental && o->this_name == NULL)
        return sbl_err_set(err, SBL_E_BadValue,
                           "thisBackupName is required when incrementalBackup is true");
    if (o->this_name != NULL && (strlen(o->this_name) == 0 || strlen(o->this_name) >= 200))
        return sbl_err_set(err, SBL_E_BadValue, "thisBackupName must be 1 to 199 bytes");
    /* A full backup starts from a fresh checkpoint: the copy then has little
     * journal to replay when it starts. */
    if (o->src_name == NULL && !o->disable_incremental)
        SBL_RET(sbl_storage_checkpoint(err));

    pthread_mutex_lock(&bk_lock);
    if (bk_open != NULL) {
        pthread_mutex_unlock(&bk_lock);
        return sbl_err_set(err, 50886,
                           "The existing backup cursor must be closed before $backupCursor can "
                           "succeed.");
    }
    chain_read(last, sizeof(last));
    if (o->src_name != NULL && (last[0] == '\0' || strcmp(last, o->src_name) != 0)) {
        pthread_mutex_unlock(&bk_lock);
        return sbl_err_set(err, SBL_E_BadValue,
                           "srcBackupName '%s' is not the last backup of the incremental chain "
                           "(%s): take a full backup",
                           o->src_name, last[0] ? last : "no chain is active");
    }
    /* The copy holds the full backup's data files: a table created or dropped
     * since (a collection, an index, $out's temporary one) cannot be brought
     * there by the journal alone. */
    char *files = data_files();
    if (o->src_name != NULL) {
        char *had = chain_files();
        bool same = had != NULL && strcmp(had, files) == 0;
        bson_free(had);
        if (!same) {
            bson_free(files);
            pthread_mutex_unlock(&bk_lock);
            return sbl_err_set(err, SBL_E_BadValue,
                               "a collection or index was created or dropped since backup '%s': "
                               "an incremental backup cannot follow it; take a full backup",
                               o->src_name);
        }
    }
    b = bson_malloc0(sizeof(*b));
    b->epoch = sbl_eng.epoch;
    b->log_only = o->src_name != NULL;
    if ((ret = sbl_eng.conn->open_session(sbl_eng.conn, NULL, NULL, &b->wt)) != 0) {
        b->wt = NULL;
        rc = sbl_wt_err(err, ret, "open backup session");
        goto err;
    }
    if ((ret = b->wt->open_cursor(b->wt, "backup:", NULL,
                                  b->log_only ? "target=(\"log:\")" : NULL, &b->cur)) != 0) {
        b->cur = NULL;
        rc = sbl_wt_err(err, ret, "open backup cursor");
        goto err;
    }
    while ((ret = b->cur->next(b->cur)) == 0) {
        const char *name;
        char rel[1024];
        if ((ret = b->cur->get_key(b->cur, &name)) != 0)
            break;
        /* Journal files live in the journal/ directory (log=(path=journal)). */
        snprintf(rel, sizeof(rel), "%s%s",
                 strncmp(name, LOG_PREFIX, strlen(LOG_PREFIX)) == 0 ? "journal/" : "", name);
        add_file(b, rel);
    }
    if (ret != WT_NOTFOUND) {
        rc = sbl_wt_err(err, ret, "backup cursor");
        goto err;
    }
    if (!b->log_only) { /* Sable's own file: the journal's compressor */
        char path[4096];
        snprintf(path, sizeof(path), "%s/sable.journalCompressor", sbl_eng.dbpath);
        if (access(path, F_OK) == 0)
            add_file(b, "sable.journalCompressor");
    }
    if (o->disable_incremental)
        rc = chain_write(NULL, NULL, err);
    else if (o->incremental)
        rc = chain_write(o->this_name, files, err);
    if (rc != 0)
        goto err;
    bson_free(files);
    b->truncate_logs = b->log_only;
    bk_open = b;
    pthread_mutex_unlock(&bk_lock);
    *bp = b;
    return 0;
err:
    bson_free(files);
    backup_end(b);
    pthread_mutex_unlock(&bk_lock);
    return rc;
}

size_t sbl_backup_nfiles(const sbl_backup_t *b)
{
    return b->n;
}

const char *sbl_backup_file(const sbl_backup_t *b, size_t i, int64_t *sizep)
{
    *sizep = b->sizes[i];
    return b->names[i];
}

const char *sbl_storage_dbpath(void)
{
    return sbl_eng.dbpath;
}

void sbl_backup_close(sbl_backup_t *b)
{
    if (b == NULL)
        return;
    pthread_mutex_lock(&bk_lock);
    backup_end(b);
    pthread_mutex_unlock(&bk_lock);
}

/* ---- fsync lock's hold ------------------------------------------------- */

int sbl_backup_hold(sbl_err_t *err)
{
    int rc = 0;
    pthread_mutex_lock(&bk_lock);
    bool take = bk_holds == 0;
    pthread_mutex_unlock(&bk_lock);
    if (take) {
        sbl_backup_t *b;
        sbl_backup_opts_t o = {0};
        SBL_RET(sbl_backup_open(&o, &b, err));
        pthread_mutex_lock(&bk_lock);
        b->truncate_logs = false;
        pthread_mutex_unlock(&bk_lock);
    }
    pthread_mutex_lock(&bk_lock);
    bk_holds++;
    pthread_mutex_unlock(&bk_lock);
    return rc;
}

void sbl_backup_release(void)
{
    pthread_mutex_lock(&bk_lock);
    if (bk_holds > 0 && --bk_holds == 0 && bk_open != NULL)
        backup_end(bk_open);
    pthread_mutex_unlock(&bk_lock);
}
