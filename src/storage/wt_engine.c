/*
 * wt_engine.c: opening and closing the storage engine: mongod.lock, the
 * WiredTiger connection and its configuration, error mapping, statistics.
 *
 * What must stay true:
 *  - The lock is taken before anything in dbpath is touched, and a failed
 *    open leaves no trace in the engine state (a second server on the same
 *    dbpath cannot disturb the first).
 *  - Close order: background threads stop (final journal flush), sessions
 *    close, counts are saved with the clean-shutdown marker, a checkpoint is
 *    taken, WiredTiger closes, the lock is released.  After close the engine
 *    can be opened again in the same process.
 */
#include "storage/wt_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"

sbl_engine_t sbl_eng;

#define SNAPPY_EXT "/usr/lib/x86_64-linux-gnu/libwiredtiger_snappy.so"
#define ZLIB_EXT "/usr/lib/x86_64-linux-gnu/libwiredtiger_zlib.so"

/*
 * Journal (log record) compression costs CPU on the committing thread: with
 * snappy it was 19% of the instructions of a 1 KB YCSB update (callgrind), on
 * a 2-core machine where CPU, not journal bandwidth, is what runs out.  So
 * sabled's default is none (mongod's is snappy); --wiredTigerJournalCompressor
 * chooses.  Collection and index files stay snappy-compressed either way.
 * WiredTiger recovers log records only with the compressor they were written
 * with, so the dbpath remembers it (JOURNAL_COMPRESSOR_FILE; a dbpath from
 * before that file existed used snappy) and a start that changes it first
 * opens and cleanly closes the engine with the old one.
 */

/*
 * Eviction: with WiredTiger's defaults (dirty target 5%, trigger 20%)
 * application threads spent most of their time waiting on the cache in the
 * random-write test of shared/notes/wiredtiger-on-this-machine.md.  The
 * dirty target is what matters for inserts with YCSB's hashed keys: they
 * land all over the tree, so a few hundred thousand of them dirty nearly
 * every leaf page, and a modified page counts as dirty with its whole
 * footprint.  With a target of 20% of the default 11.5 GB cache, runs of
 * 150,000 inserts fell from 22,000 to 9,400-10,800 inserts/s once the
 * tree passed 2.3 GB (2.4M documents): eviction then wrote pages between
 * checkpoints, 13,000 a run, which the next inserts dirtied again.  With
 * 50%/75% the same runs stayed at 19,000-25,000 with no page written
 * between checkpoints (docs/BENCHMARKS.md, "Design choices measured").  The price: a
 * checkpoint may find more dirty pages (eviction no longer cleaned some of
 * them before it), but each is written once instead of twice.  Build with
 * -DSBL_EVICTION_CONFIG=... or start with --wiredTigerEngineConfigString
 * to try others.
 */
#ifndef SBL_EVICTION_CONFIG /* overridable at compile time for measurements */
#define SBL_EVICTION_CONFIG                                                                        \
    "eviction=(threads_min=1,threads_max=4),eviction_target=80,eviction_trigger=95,"              \
    "eviction_dirty_target=50,eviction_dirty_trigger=75"
#endif

#define JOURNAL_COMPRESSOR_FILE "sable.journalCompressor"

/* The compressor the journal of dbpath was written with: from the marker
 * file, else "snappy" when the dbpath already holds a database, else NULL. */
static const char *journal_compressor_used(const char *dbpath)
{
    char path[4096], buf[16] = "";
    snprintf(path, sizeof(path), "%s/" JOURNAL_COMPRESSOR_FILE, dbpath);
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        buf[strcspn(buf, "\n")] = '\0';
        if (strcmp(buf, "none") == 0)
            return "none";
        if (strcmp(buf, "zlib") == 0)
            return "zlib";
        if (strcmp(buf, "snappy") == 0)
            return "snappy";
        return NULL;
    }
    snprintf(path, sizeof(path), "%s/WiredTiger.wt", dbpath);
    return access(path, F_OK) == 0 ? "snappy" : NULL;
}

static void journal_compressor_remember(const char *dbpath, const char *jc)
{
    char path[4096], tmp[4112];
    snprintf(path, sizeof(path), "%s/" JOURNAL_COMPRESSOR_FILE, dbpath);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return;
    bool ok = fprintf(f, "%s\n", jc) > 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) == 0 && ok)
        rename(tmp, path);
    else
        unlink(tmp);
}

/* The configuration for wiredtiger_open; extra (the user's configString)
 * comes last, so its keys override ours.  Fails when it does not fit. */
static int build_config(char *config, size_t cap, uint64_t cache_mb, const char *jc,
                        const char *exts, const char *extra, sbl_err_t *err)
{
    bool compress = strcmp(jc, "none") != 0;
    int n = snprintf(config, cap,
                     "create,cache_size=%lluM,session_max=2000,statistics=(fast),"
                     "log=(enabled=true,archive=false,path=journal%s%s),"
                     "transaction_sync=(enabled=false),file_manager=(close_idle_time=600),"
                     "%s," SBL_EVICTION_CONFIG "%s%s",
                     (unsigned long long)cache_mb, compress ? ",compressor=" : "",
                     compress ? jc : "", exts, extra != NULL && *extra ? "," : "",
                     extra != NULL ? extra : "");
    if (n < 0 || (size_t)n >= cap)
        return sbl_err_set(err, SBL_E_BadValue, "wiredTigerEngineConfigString is too long");
    return 0;
}

int sbl_wt_err(sbl_err_t *err, int ret, const char *what)
{
    switch (ret) {
    case 0:
        return 0;
    case WT_ROLLBACK:
        sbl_prepare_conflict_take(NULL); /* this WriteConflict is an ordinary one */
        return sbl_err_set(err, SBL_E_WriteConflict,
                           "WriteConflict error: this operation conflicted with another "
                           "operation. Please retry your operation or multi-document transaction.");
    case WT_PREPARE_CONFLICT: /* a prepared transaction's write: callers wait and retry */
        sbl_prepare_note_conflict();
        return sbl_err_set(err, SBL_E_WriteConflict,
                           "WriteConflict error: this operation conflicted with a prepared "
                           "transaction. Please retry your operation or multi-document "
                           "transaction.");
    case WT_CACHE_FULL:
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit,
                           "%s: the WiredTiger cache is full (cacheSizeGB too small)", what);
    case ENOSPC:
        sbl_space_note_error(ret);
        return sbl_err_set(err, SBL_E_OutOfDiskSpace, "%s: no space left on device", what);
    case EMFILE:
    case ENFILE:
        return sbl_err_set(err, SBL_E_TooManyFilesOpen, "%s: too many open files", what);
    case WT_PANIC:
        sbl_space_note_error(ret);
        sbl_log(SBL_LOG_FATAL, "STORAGE", 22435, "WiredTiger panic", NULL);
        return sbl_err_set(err, SBL_E_InternalError, "%s: WiredTiger panic", what);
    default:
        return sbl_err_set(err, SBL_E_InternalError, "%s: WiredTiger error %d: %s", what, ret,
                           wiredtiger_strerror(ret));
    }
}

sbl_wt_table_t *sbl_table_new(const char *uri)
{
    sbl_wt_table_t *t = bson_malloc0(sizeof(*t));
    t->uri = bson_strdup(uri);
    t->ident = t->uri + strlen("table:");
    t->id = atomic_fetch_add(&sbl_eng.next_table_id, 1) + 1;
    atomic_init(&t->refs, 1);
    atomic_init(&t->dropped, false);
    atomic_init(&t->count, 0);
    atomic_init(&t->data_size, 0);
    pthread_rwlock_init(&t->idx_lock, NULL);
    atomic_init(&t->nidx_quick, 0);
    return t;
}

void sbl_table_ref(sbl_wt_table_t *t)
{
    atomic_fetch_add(&t->refs, 1);
}

void sbl_table_unref(sbl_wt_table_t *t)
{
    if (t != NULL && atomic_fetch_sub(&t->refs, 1) == 1) {
        sbl_index_free_all(t);
        sbl_capped_free(t);
        pthread_rwlock_destroy(&t->idx_lock);
        bson_free(t->key_field);
        bson_free(t->uri);
        bson_free(t);
    }
}

/* Take dbpath/mongod.lock without truncating it (the holder's pid must
 * survive a failed attempt).  *fdp is the locked descriptor. */
static int lock_dbpath(const char *dbpath, int *fdp, sbl_err_t *err)
{
    char path[4096];
    int fd;

    *fdp = -1;
    snprintf(path, sizeof(path), "%s/mongod.lock", dbpath);
    if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0)
        return sbl_err_set(err, SBL_E_InternalError,
                           "Unable to create/open the lock file: %s (%s). Ensure the user "
                           "executing sabled is the owner of the lock file and has the "
                           "appropriate permissions",
                           path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        return sbl_err_set(err, SBL_E_InternalError,
                           "DBPathInUse: Unable to lock the lock file: %s (%s). Another sabled "
                           "instance is probably running on this dbpath",
                           path, strerror(e));
    }
    *fdp = fd;
    return 0;
}

/* Replace the lock file's content with our pid. */
static int write_pid(int fd, sbl_err_t *err)
{
    char pid[32];
    int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());

    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n || fsync(fd) != 0)
        return sbl_err_set(err, SBL_E_InternalError, "Unable to write the lock file: %s",
                           strerror(errno));
    return 0;
}

static void unlock_dbpath(void)
{
    if (sbl_eng.lock_fd >= 0) {
        /* An empty lock file means a clean shutdown, as with mongod. */
        if (ftruncate(sbl_eng.lock_fd, 0) == 0)
            (void)fsync(sbl_eng.lock_fd);
        flock(sbl_eng.lock_fd, LOCK_UN);
        close(sbl_eng.lock_fd);
        sbl_eng.lock_fd = -1;
    }
}

/* mongod's default: 50% of (RAM - 1 GB), at least 256 MB. */
static uint64_t default_cache_mb(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    uint64_t ram_mb = (pages > 0 && psize > 0) ? (uint64_t)pages * (uint64_t)psize >> 20 : 0;
    uint64_t mb = ram_mb > 1024 ? (ram_mb - 1024) / 2 : 0;
    return mb < 256 ? 256 : mb;
}

static void wt_message_log(const char *msg, char severity)
{
    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&attr, "message", msg);
    sbl_log(severity, "WTERR", 22435, "WiredTiger message", &attr);
    bson_destroy(&attr);
}

static int on_wt_error(WT_EVENT_HANDLER *h, WT_SESSION *s, int error, const char *message)
{
    /* EBUSY from drops and checkpoints is expected and retried. */
    if (error != EBUSY)
        wt_message_log(message, SBL_LOG_ERROR);
    return 0;
}

static int on_wt_message(WT_EVENT_HANDLER *h, WT_SESSION *s, const char *message)
{
    wt_message_log(message, SBL_LOG_INFO);
    return 0;
}

static WT_EVENT_HANDLER wt_events = {on_wt_error, on_wt_message, NULL, NULL};

static void init_sync_objects(void)
{
    pthread_rwlock_init(&sbl_eng.cat_lock, NULL);
    pthread_mutex_init(&sbl_eng.sess_lock, NULL);
    pthread_mutex_init(&sbl_eng.bg_lock, NULL);
    pthread_mutex_init(&sbl_eng.fl_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sbl_eng.bg_cond, &ca);
    pthread_cond_init(&sbl_eng.fl_cond, &ca);
    pthread_condattr_destroy(&ca);
}

static void destroy_sync_objects(void)
{
    pthread_rwlock_destroy(&sbl_eng.cat_lock);
    pthread_mutex_destroy(&sbl_eng.sess_lock);
    pthread_mutex_destroy(&sbl_eng.bg_lock);
    pthread_mutex_destroy(&sbl_eng.fl_lock);
    pthread_cond_destroy(&sbl_eng.bg_cond);
    pthread_cond_destroy(&sbl_eng.fl_cond);
}

int sbl_storage_open(const sbl_storage_config_t *cfg, sbl_err_t *err)
{
    static uint64_t epochs;
    char jpath[4096], config[8192];
    uint64_t cache_mb;
    int lock_fd = -1, rc = 0, ret;

    if (cfg == NULL || cfg->dbpath == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "storage: no dbpath");
    struct stat st;
    if (stat(cfg->dbpath, &st) != 0 || !S_ISDIR(st.st_mode))
        return sbl_err_set(err, SBL_E_InternalError,
                           "NonExistentPath: Data directory %s not found. Create the missing "
                           "directory or specify another path using --dbpath.",
                           cfg->dbpath);
    SBL_RET(lock_dbpath(cfg->dbpath, &lock_fd, err));
    if (sbl_eng.open || (rc = write_pid(lock_fd, err)) != 0) {
        close(lock_fd); /* also releases the lock we just took */
        return sbl_eng.open ? sbl_err_set(err, SBL_E_InternalError,
                                          "storage engine is already open")
                            : rc;
    }

    memset(&sbl_eng, 0, sizeof(sbl_eng));
    sbl_eng.lock_fd = lock_fd;
    sbl_eng.epoch = ++epochs;
    sbl_eng.dbpath = bson_strdup(cfg->dbpath);
    sbl_eng.commit_interval_ms = cfg->commit_interval_ms > 0 ? cfg->commit_interval_ms : 100;
    sbl_eng.syncdelay_s = cfg->syncdelay_s >= 0 ? cfg->syncdelay_s : 60;
    sbl_eng.ttl_sleep_s = cfg->ttl_monitor_sleep_s > 0 ? cfg->ttl_monitor_sleep_s : 60;
    atomic_store(&sbl_eng.txn_gen, 1);
    sbl_eng.waiters_tail = &sbl_eng.waiters;
    init_sync_objects();

    snprintf(jpath, sizeof(jpath), "%s/journal", cfg->dbpath);
    if (mkdir(jpath, 0755) != 0 && errno != EEXIST) {
        rc = sbl_err_set(err, SBL_E_InternalError, "cannot create %s: %s", jpath,
                         strerror(errno));
        goto err;
    }

    cache_mb = cfg->cache_size_gb > 0 ? (uint64_t)(cfg->cache_size_gb * 1024.0) : 0;
    if (cache_mb == 0)
        cache_mb = default_cache_mb();
    sbl_eng.have_snappy = access(SNAPPY_EXT, R_OK) == 0;
    if ((rc = sbl_table_configs_build(cfg, err)) != 0)
        goto err;
    const char *jc = cfg->journal_compressor != NULL ? cfg->journal_compressor : "none";
    /* Both extensions are loaded whenever installed: recovery must read log
     * records an earlier start compressed with either. */
    bool have_zlib = access(ZLIB_EXT, R_OK) == 0;
    if ((strcmp(jc, "snappy") == 0 && !sbl_eng.have_snappy) ||
        (strcmp(jc, "zlib") == 0 && !have_zlib)) {
        rc = sbl_err_set(err, SBL_E_BadValue, "journalCompressor %s: WiredTiger's %s extension "
                         "is not installed", jc, jc);
        goto err;
    }
    char exts[512];
    snprintf(exts, sizeof(exts), "extensions=[%s%s%s]", sbl_eng.have_snappy ? SNAPPY_EXT : "",
             sbl_eng.have_snappy && have_zlib ? "," : "", have_zlib ? ZLIB_EXT : "");
    const char *used = journal_compressor_used(cfg->dbpath);
    if (used != NULL && strcmp(used, jc) != 0) {
        /* Recover (and checkpoint) with the journal's own compressor first. */
        WT_CONNECTION *old = NULL;
        if ((rc = build_config(config, sizeof(config), cache_mb, used, exts, cfg->wt_config,
                               err)) != 0)
            goto err;
        if ((ret = wiredtiger_open(cfg->dbpath, &wt_events, config, &old)) != 0 ||
            (ret = old->close(old, NULL)) != 0) {
            rc = sbl_wt_err(err, ret, "wiredtiger_open with the journal's previous compressor");
            goto err;
        }
    }
    if ((rc = build_config(config, sizeof(config), cache_mb, jc, exts, cfg->wt_config, err)) != 0)
        goto err;
    if ((ret = wiredtiger_open(cfg->dbpath, &wt_events, config, &sbl_eng.conn)) != 0) {
        rc = sbl_wt_err(err, ret, "wiredtiger_open");
        sbl_eng.conn = NULL;
        goto err;
    }
    if (used == NULL || strcmp(used, jc) != 0)
        journal_compressor_remember(cfg->dbpath, jc);
    if (getrandom(&sbl_eng.ident_rand, sizeof(sbl_eng.ident_rand), 0) !=
        sizeof(sbl_eng.ident_rand))
        sbl_eng.ident_rand = (uint64_t)getpid() * 2654435761u;
    sbl_eng.ident_rand %= 10000000000000000000ull;
    SBL_ERR(sbl_catalog_load(err));
    sbl_eng.open = true;
    SBL_ERR(sbl_bg_start(err));
    SBL_ERR(sbl_ttl_start(err));

    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&attr, "dbpath", cfg->dbpath);
    BSON_APPEND_INT64(&attr, "cacheSizeMB", (int64_t)cache_mb);
    sbl_log(SBL_LOG_INFO, "STORAGE", 22315, "Opening WiredTiger", &attr);
    bson_destroy(&attr);
    return 0;

err:
    sbl_ttl_stop();
    sbl_bg_stop();
    sbl_eng.open = false;
    sbl_catalog_unload();
    if (sbl_eng.conn != NULL)
        sbl_eng.conn->close(sbl_eng.conn, NULL);
    sbl_eng.conn = NULL;
    unlock_dbpath();
    bson_free(sbl_eng.dbpath);
    destroy_sync_objects();
    memset(&sbl_eng, 0, sizeof(sbl_eng));
    sbl_eng.lock_fd = -1;
    return rc;
}

void sbl_storage_close(void)
{
    sbl_err_t err;
    int ret;

    if (!sbl_eng.open)
        return;
    sbl_ttl_stop();
    sbl_bg_stop();
    sbl_sessions_close_all();
    sbl_drop_retry(sbl_eng.cat_wt);

    pthread_rwlock_wrlock(&sbl_eng.cat_lock);
    if (sbl_catalog_save_sizes(sbl_eng.cat_wt, true, &err) != 0)
        sbl_log(SBL_LOG_WARNING, "STORAGE", 22430, err.msg, NULL);
    if ((ret = sbl_eng.cat_wt->checkpoint(sbl_eng.cat_wt, NULL)) != 0) {
        sbl_wt_err(&err, ret, "final checkpoint");
        sbl_log(SBL_LOG_WARNING, "STORAGE", 22430, err.msg, NULL);
    }
    pthread_rwlock_unlock(&sbl_eng.cat_lock);
    sbl_eng.open = false;
    sbl_catalog_unload();
    if ((ret = sbl_eng.conn->close(sbl_eng.conn, NULL)) != 0) {
        sbl_wt_err(&err, ret, "WiredTiger close");
        sbl_log(SBL_LOG_WARNING, "STORAGE", 22430, err.msg, NULL);
    }
    sbl_eng.conn = NULL;
    /* Drops still refused are orphans now; the next open drops them. */
    while (sbl_eng.drops != NULL) {
        sbl_pending_drop_t *d = sbl_eng.drops;
        sbl_eng.drops = d->next;
        bson_free(d->uri);
        bson_free(d);
    }
    unlock_dbpath();
    bson_free(sbl_eng.dbpath);
    destroy_sync_objects();
    uint64_t epoch = sbl_eng.epoch;
    memset(&sbl_eng, 0, sizeof(sbl_eng));
    sbl_eng.epoch = epoch;
    sbl_eng.lock_fd = -1;
    sbl_log(SBL_LOG_INFO, "STORAGE", 4795902, "WiredTiger closed", NULL);
}

static const struct {
    const char *section;
    int key;
    const char *name;
} wt_stats[] = {
    {"cache", WT_STAT_CONN_CACHE_BYTES_INUSE, "bytes currently in the cache"},
    {"cache", WT_STAT_CONN_CACHE_BYTES_MAX, "maximum bytes configured"},
    {"cache", WT_STAT_CONN_CACHE_BYTES_DIRTY, "tracked dirty bytes in the cache"},
    {"cache", WT_STAT_CONN_CACHE_READ, "pages read into cache"},
    {"cache", WT_STAT_CONN_CACHE_WRITE, "pages written from cache"},
    {"cache", WT_STAT_CONN_CACHE_EVICTION_DIRTY, "modified pages evicted"},
    {"cache", WT_STAT_CONN_CACHE_EVICTION_APP, "pages evicted by application threads"},
    {"cache", WT_STAT_CONN_CACHE_EVICTION_APP_DIRTY, "modified pages evicted by application threads"},
    {"cache", WT_STAT_CONN_CACHE_EVICTION_CLEAN, "unmodified pages evicted"},
    {"cache", WT_STAT_CONN_CACHE_BYTES_WRITE, "bytes written from cache"},
    {"cache", WT_STAT_CONN_CACHE_EVICTION_FORCE, "forced eviction - pages selected count"},
    {"cache", WT_STAT_CONN_CACHE_EVICTION_FORCE_FAIL,
     "forced eviction - pages selected unable to be evicted count"},
    {"cache", WT_STAT_CONN_CACHE_INMEM_SPLIT, "in-memory page splits"},
    {"cache", WT_STAT_CONN_CACHE_EVICTION_SPLIT_LEAF, "leaf pages split during eviction"},
    {"cache", WT_STAT_CONN_CACHE_LOOKASIDE_INSERT, "cache overflow table insert calls"},
    {"cache", WT_STAT_CONN_CACHE_LOOKASIDE_ENTRIES, "cache overflow table entries"},
    {"cursor", WT_STAT_CONN_CURSOR_MODIFY, "cursor modify calls"},
    {"cursor", WT_STAT_CONN_CURSOR_UPDATE, "cursor update calls"},
    {"log", WT_STAT_CONN_LOG_BYTES_WRITTEN, "log bytes written"},
    {"log", WT_STAT_CONN_LOG_SYNC, "log sync operations"},
    {"log", WT_STAT_CONN_LOG_FLUSH, "log flush operations"},
    {"thread-yield", WT_STAT_CONN_APPLICATION_CACHE_TIME,
     "application thread time waiting for cache (usecs)"},
    {"transaction", WT_STAT_CONN_TXN_CHECKPOINT, "transaction checkpoints"},
    {"transaction", WT_STAT_CONN_TXN_CHECKPOINT_RUNNING, "transaction checkpoint currently running"},
    {"transaction", WT_STAT_CONN_TXN_CHECKPOINT_TIME_RECENT,
     "transaction checkpoint most recent time (msecs)"},
};

void sbl_storage_append_stats(bson_t *out)
{
    sbl_session_t *s = sbl_session_get();
    WT_CURSOR *c = NULL;
    bson_t sub;
    const char *section = NULL;
    size_t i;

    if (s == NULL || s->wt->open_cursor(s->wt, "statistics:", NULL, NULL, &c) != 0)
        return;
    for (i = 0; i < sizeof(wt_stats) / sizeof(wt_stats[0]); i++) {
        const char *desc, *pvalue;
        int64_t v = 0;
        if (section == NULL || strcmp(section, wt_stats[i].section) != 0) {
            if (section != NULL)
                bson_append_document_end(out, &sub);
            section = wt_stats[i].section;
            bson_append_document_begin(out, section, -1, &sub);
        }
        c->set_key(c, wt_stats[i].key);
        if (c->search(c) == 0)
            c->get_value(c, &desc, &pvalue, &v);
        BSON_APPEND_INT64(&sub, wt_stats[i].name, v);
    }
    if (section != NULL)
        bson_append_document_end(out, &sub);
    c->close(c);
}
