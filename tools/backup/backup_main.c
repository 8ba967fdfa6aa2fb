/*
 * sable-backup: a hot backup of a running Sable server, as a backup agent
 * beside mongod does it with $backupCursor.  It opens the server's backup
 * cursor (aggregate: 1 on admin, [{$backupCursor: {...}}]), reads the list of
 * files, copies each from the server's dbpath (so it runs on the server's
 * machine, or where the dbpath is mounted: --dbpath names it when the path the
 * server reports is not the one to read), fsyncs them, and closes the cursor
 * with killCursors.  Writes go on meanwhile.
 *
 * A full backup starts an incremental chain (unless --noIncrementalBase);
 * --incremental copies only the journal files written since the chain's
 * last backup over the earlier copy (Sable's incremental backups are
 * journal-based: the copy replays them when it starts).  DIR/sable-backup.json
 * names the chain's last backup.
 *
 * What must stay true: the cursor stays open until every file is copied (a
 * getMore every minute keeps it from the server's idle reaper); a failed copy
 * exits 1 and says the directory is not a usable backup.
 */
#include "tool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STATE_FILE "sable-backup.json"

typedef struct bopts {
    const char *out, *dbpath;
    bool incremental, no_base, no_fsync;
} bopts_t;

static const char usage[] =
    "usage: sable-backup --out DIR [--incremental] [options]\n"
    "  Copies a running server's files into DIR while writes continue ($backupCursor).\n"
    "  Run it where the server's dbpath is readable (the server's machine).  Start the\n"
    "  copy with sabled --dbpath DIR (a copy of DIR, if more --incremental runs follow).";

static int mkdirs(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* Copy src to dst (replaced) up to src's end, which may move while copying; the
   bytes go to the progress line. */
static int copy_file(const char *src, const char *dst, bool do_fsync, tool_progress_t *prog)
{
    int in = open(src, O_RDONLY), out = -1, rc = -1;
    if (in < 0)
        return tool_err("cannot open %s: %s", src, strerror(errno));
    out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0) {
        tool_err("cannot create %s: %s", dst, strerror(errno));
        goto done;
    }
    posix_fadvise(in, 0, 0, POSIX_FADV_SEQUENTIAL);
    for (;;) {
        ssize_t n = copy_file_range(in, NULL, out, NULL, 64 << 20, 0);
        if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL)) {
            static char buf[1 << 20];
            n = read(in, buf, sizeof(buf));
            if (n > 0 && write(out, buf, (size_t)n) != n)
                n = -1;
        }
        if (n < 0) {
            tool_err("copying %s: %s", src, strerror(errno));
            goto done;
        }
        if (n == 0)
            break;
        tool_progress_add(prog, 0, n);
        if (do_fsync) /* start the write-back now; the fsync at the end then waits less */
            sync_file_range(out, 0, 0, SYNC_FILE_RANGE_WRITE);
    }
    if (do_fsync && fsync(out) != 0) {
        tool_err("fsync %s: %s", dst, strerror(errno));
        goto done;
    }
    rc = 0;
done:
    if (out >= 0 && close(out) != 0 && rc == 0)
        rc = tool_err("closing %s: %s", dst, strerror(errno));
    close(in);
    return rc;
}

/* The chain's last backup name from DIR/sable-backup.json into name. */
static int read_state(const char *dir, char *name, size_t cap)
{
    char path[4096];
    bson_error_t e;
    bson_json_reader_t *r;
    bson_t doc = BSON_INITIALIZER;
    bson_iter_t it;
    snprintf(path, sizeof(path), "%s/" STATE_FILE, dir);
    if ((r = bson_json_reader_new_from_file(path, &e)) == NULL)
        return tool_err("--incremental: %s has no earlier backup (%s)", dir, e.message);
    int ok = bson_json_reader_read(r, &doc, &e);
    bson_json_reader_destroy(r);
    if (ok != 1 || !bson_iter_init_find(&it, &doc, "lastBackup") || !BSON_ITER_HOLDS_UTF8(&it)) {
        bson_destroy(&doc);
        return tool_err("--incremental: %s is not readable", path);
    }
    snprintf(name, cap, "%s", bson_iter_utf8(&it, NULL));
    bson_destroy(&doc);
    if (name[0] == '\0')
        return tool_err("--incremental: the backup in %s started no chain (--noIncrementalBase)",
                        dir);
    return 0;
}

static int write_state(const char *dir, const char *name, const char *src_dbpath)
{
    char path[4096];
    bson_t doc = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&doc, "lastBackup", name);
    BSON_APPEND_UTF8(&doc, "sourceDbpath", src_dbpath);
    BSON_APPEND_DATE_TIME(&doc, "at", (int64_t)(tool_now() * 1000));
    char *js = bson_as_relaxed_extended_json(&doc, NULL);
    snprintf(path, sizeof(path), "%s/" STATE_FILE, dir);
    FILE *f = fopen(path, "w");
    int rc = f != NULL && fprintf(f, "%s\n", js) > 0 ? 0 : -1;
    if (f != NULL && fclose(f) != 0)
        rc = -1;
    bson_free(js);
    bson_destroy(&doc);
    return rc == 0 ? 0 : tool_err("cannot write %s", path);
}

/* Run getMore on the backup cursor: more file documents into files, or none. */
static int get_more(mongoc_client_t *c, int64_t id, bson_t *batch_out)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    bson_iter_t it;
    BSON_APPEND_INT64(&cmd, "getMore", id);
    BSON_APPEND_UTF8(&cmd, "collection", "$cmd.aggregate");
    int rc = tool_command(c, "admin", &cmd, &reply, "getMore on the backup cursor");
    bson_destroy(&cmd);
    if (rc == 0 && bson_iter_init(&it, &reply) &&
        bson_iter_find_descendant(&it, "cursor.nextBatch", &it) && BSON_ITER_HOLDS_ARRAY(&it)) {
        uint32_t len;
        const uint8_t *data;
        bson_t b;
        bson_iter_array(&it, &len, &data);
        bson_init_static(&b, data, len);
        if (batch_out != NULL)
            bson_copy_to(&b, batch_out);
    } else if (rc == 0 && batch_out != NULL) {
        bson_init(batch_out);
    }
    bson_destroy(&reply);
    return rc;
}

static void kill_cursor(mongoc_client_t *c, int64_t id)
{
    bson_t cmd = BSON_INITIALIZER, reply, ids;
    BSON_APPEND_UTF8(&cmd, "killCursors", "$cmd.aggregate");
    BSON_APPEND_ARRAY_BEGIN(&cmd, "cursors", &ids);
    BSON_APPEND_INT64(&ids, "0", id);
    bson_append_array_end(&cmd, &ids);
    tool_command(c, "admin", &cmd, &reply, "closing the backup cursor");
    bson_destroy(&reply);
    bson_destroy(&cmd);
}

int main(int argc, char **argv)
{
    bopts_t o = {0};
    tool_conn_t conn = {0};
    const tool_opt_t opts[] = {
        {"out", 'o', TO_STR, &o.out, "the backup directory (created; empty for a full backup)"},
        {"incremental", 0, TO_FLAG, &o.incremental,
         "copy the journal written since DIR's backup over it"},
        {"dbpath", 0, TO_STR, &o.dbpath,
         "read the files here instead of the dbpath the server reports"},
        {"noIncrementalBase", 0, TO_FLAG, &o.no_base,
         "a full backup that starts no chain (the server keeps no journal for one)"},
        {"noFsync", 0, TO_FLAG, &o.no_fsync, "do not fsync the copied files"},
        {NULL, 0, 0, NULL, NULL},
    };
    int rc = tool_opts_parse("sable-backup", usage, argc, argv, opts, &conn, NULL);
    if (rc != 0)
        return rc > 0 ? 0 : 1;
    if (o.out == NULL)
        return tool_err("--out DIR is required") ? 1 : 1;
    if (o.incremental && o.no_base)
        return tool_err("--incremental and --noIncrementalBase do not go together") ? 1 : 1;

    char last[256] = "", name[64], path[4096];
    if (o.incremental) {
        if (read_state(o.out, last, sizeof(last)) != 0)
            return 1;
        snprintf(path, sizeof(path), "%s/WiredTiger.backup", o.out);
        if (access(path, F_OK) != 0)
            return tool_err("--incremental: %s has been started as a server (no "
                            "WiredTiger.backup): take a full backup",
                            o.out) ? 1 : 1;
    } else {
        if (mkdirs(o.out) != 0)
            return tool_err("cannot create %s: %s", o.out, strerror(errno)) ? 1 : 1;
        snprintf(path, sizeof(path), "%s/WiredTiger.backup", o.out);
        if (access(path, F_OK) == 0)
            return tool_err("%s already holds a backup: give an empty directory, or "
                            "--incremental", o.out) ? 1 : 1;
    }
    snprintf(name, sizeof(name), "sable-backup-%lld", (long long)(tool_now() * 1000));

    mongoc_client_t *c = tool_connect(&conn);
    if (c == NULL)
        return 1;
    double start = tool_now(), opened, copied;
    bson_t cmd = BSON_INITIALIZER, reply, pipe, stage, spec, cur;
    BSON_APPEND_INT32(&cmd, "aggregate", 1);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "pipeline", &pipe);
    BSON_APPEND_DOCUMENT_BEGIN(&pipe, "0", &stage);
    BSON_APPEND_DOCUMENT_BEGIN(&stage, "$backupCursor", &spec);
    if (!o.no_base) {
        BSON_APPEND_BOOL(&spec, "incrementalBackup", true);
        BSON_APPEND_UTF8(&spec, "thisBackupName", name);
        if (o.incremental)
            BSON_APPEND_UTF8(&spec, "srcBackupName", last);
    }
    bson_append_document_end(&stage, &spec);
    bson_append_document_end(&pipe, &stage);
    bson_append_array_end(&cmd, &pipe);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "cursor", &cur);
    bson_append_document_end(&cmd, &cur);
    rc = tool_command(c, "admin", &cmd, &reply, "$backupCursor");
    bson_destroy(&cmd);
    opened = tool_now();
    if (rc != 0) {
        mongoc_client_destroy(c);
        return 1;
    }

    /* The listing: firstBatch, then getMores until an empty batch. */
    bson_iter_t it, f;
    int64_t id = 0;
    bson_t files = BSON_INITIALIZER;
    uint32_t nfiles = 0;
    char dbpath[4096] = "";
    bson_t batch;
    bool first = true;
    if (bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.id", &it))
        id = bson_iter_as_int64(&it);
    bson_iter_init(&it, &reply);
    bson_iter_find_descendant(&it, "cursor.firstBatch", &it);
    {
        uint32_t len;
        const uint8_t *data;
        bson_t b;
        bson_iter_array(&it, &len, &data);
        bson_init_static(&b, data, len);
        bson_copy_to(&b, &batch);
    }
    bson_destroy(&reply);
    for (;;) {
        bson_iter_t bi;
        bool any = false;
        bson_iter_init(&bi, &batch);
        while (bson_iter_next(&bi)) {
            bson_t d;
            uint32_t len;
            const uint8_t *data;
            any = true;
            bson_iter_document(&bi, &len, &data);
            bson_init_static(&d, data, len);
            if (first && bson_iter_init(&f, &d) &&
                bson_iter_find_descendant(&f, "metadata.dbpath", &f) && BSON_ITER_HOLDS_UTF8(&f)) {
                snprintf(dbpath, sizeof(dbpath), "%s", bson_iter_utf8(&f, NULL));
            } else if (bson_iter_init_find(&f, &d, "filename") && BSON_ITER_HOLDS_UTF8(&f)) {
                char key[16];
                const char *k;
                bson_uint32_to_string(nfiles++, &k, key, sizeof(key));
                BSON_APPEND_UTF8(&files, k, bson_iter_utf8(&f, NULL));
            }
            first = false;
        }
        bson_destroy(&batch);
        if (!any || id == 0)
            break;
        if (get_more(c, id, &batch) != 0) {
            rc = -1;
            break;
        }
    }

    /* Copy, with a progress line against the files' sizes now (they may grow). */
    tool_progress_t prog;
    tool_progress_start(&prog, o.incremental ? "incremental backup" : "full backup", 0);
    prog.unit = "files";
    size_t dlen = strlen(dbpath);
    bson_iter_init(&it, &files);
    while (rc == 0 && bson_iter_next(&it)) {
        const char *src = bson_iter_utf8(&it, NULL);
        struct stat st;
        if (dlen > 0 && strncmp(src, dbpath, dlen) == 0 && src[dlen] == '/' &&
            snprintf(path, sizeof(path), "%s/%s", o.dbpath != NULL ? o.dbpath : dbpath,
                     src + dlen + 1) < (int)sizeof(path) &&
            stat(path, &st) == 0)
            prog.total_bytes += st.st_size;
    }
    double last_ping = tool_now();
    bson_iter_init(&it, &files);
    while (rc == 0 && bson_iter_next(&it)) {
        const char *src = bson_iter_utf8(&it, NULL);
        const char *rel = src;
        char from[4096], to[4096];
        if (dlen > 0 && strncmp(src, dbpath, dlen) == 0 && src[dlen] == '/')
            rel = src + dlen + 1;
        else {
            rc = tool_err("file %s is not under the dbpath %s", src, dbpath);
            break;
        }
        int nf = snprintf(from, sizeof(from), "%s/%s", o.dbpath != NULL ? o.dbpath : dbpath, rel);
        int nt = snprintf(to, sizeof(to), "%s/%s", o.out, rel);
        if (nf < 0 || (size_t)nf >= sizeof(from) || nt < 0 || (size_t)nt >= sizeof(to)) {
            rc = tool_err("path too long for %s", rel);
            break;
        }
        char *slash = strrchr(to, '/');
        *slash = '\0';
        if (mkdirs(to) != 0) {
            rc = tool_err("cannot create %s: %s", to, strerror(errno));
            break;
        }
        *slash = '/';
        if (strcmp(rel, "WiredTiger.ibackup") == 0)
            continue; /* WiredTiger's marker of a journal-only listing: not for the copy */
        rc = copy_file(from, to, !o.no_fsync, &prog);
        tool_progress_add(&prog, 1, 0);
        if (rc == 0 && tool_now() - last_ping > 60) { /* keep the cursor from the reaper */
            rc = get_more(c, id, NULL);
            last_ping = tool_now();
        }
    }
    if (rc == 0 && !o.no_fsync) {
        int dfd = open(o.out, O_RDONLY | O_DIRECTORY);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    if (rc == 0)
        rc = write_state(o.out, o.no_base ? "" : name, dbpath);
    copied = tool_now();
    if (id != 0)
        kill_cursor(c, id);
    double secs = tool_now() - start;
    int64_t bytes = prog.bytes;
    if (rc == 0)
        tool_log("%s backup %s: %u files, %.1f MB in %.2fs (%.1f MB/s; the server's "
                 "checkpoint and listing %.2fs, copying and syncing %.2fs: %.1f MB/s) into %s",
                 o.incremental ? "incremental" : "full", name, nfiles, bytes / 1e6, secs,
                 secs > 0 ? bytes / 1e6 / secs : 0, opened - start, copied - opened,
                 copied > opened ? bytes / 1e6 / (copied - opened) : 0, o.out);
    else
        tool_err("backup failed: %s is not a usable backup", o.out);
    bson_destroy(&files);
    mongoc_client_destroy(c);
    return rc == 0 ? 0 : 1;
}
