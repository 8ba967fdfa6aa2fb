/*
 * sable-restore: mongorestore for Sable.  Reads a dump directory (the whole
 * server, one database's directory with --db, or one .bson file with --db and
 * --collection) or a mongodump archive (--archive[=FILE], --gzip), selects and
 * renames namespaces (--db, --collection, --nsInclude, --nsExclude, --nsFrom,
 * --nsTo) and restores collections, then views, then roles and users.
 *
 * What must stay true: nothing is half-restored silently.  When a file or
 * the archive is corrupt or the server refuses, the run goes on where it
 * safely can (not past a corrupt archive), exits non-zero, and ends with the
 * list of namespaces restored completely, partly, and not at all.
 */
#include "restore.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char usage[] =
    "usage: sable-restore [options] [DIR | FILE.bson]\n"
    "  Restores what sable-dump or mongodump wrote: a dump directory (default ./dump),\n"
    "  one database's directory (--db), one .bson file (--db, --collection), or an\n"
    "  archive (--archive[=FILE], standard input without FILE).";

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static rintent_t *find_intent(restore_t *r, const char *db, const char *coll, bool create)
{
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->in[i].db, db) == 0 && strcmp(r->in[i].coll, coll) == 0)
            return &r->in[i];
    if (!create)
        return NULL;
    r->in = realloc(r->in, sizeof(rintent_t) * (size_t)(r->n + 1));
    rintent_t *it = &r->in[r->n++];
    memset(it, 0, sizeof(*it));
    snprintf(it->db, sizeof(it->db), "%s", db);
    snprintf(it->coll, sizeof(it->coll), "%s", coll);
    it->meta = bson_new();
    if (strcmp(coll, "$admin.system.users") == 0 ||
        (strcmp(db, "admin") == 0 && strcmp(coll, "system.users") == 0))
        it->kind = RK_USERS;
    else if (strcmp(coll, "$admin.system.roles") == 0 ||
             (strcmp(db, "admin") == 0 && strcmp(coll, "system.roles") == 0))
        it->kind = RK_ROLES;
    return it;
}

/* Metadata text: sets the kind from its type. */
static int set_meta(rintent_t *it, const char *json, const char *origin)
{
    if (restore_parse_meta(it, json, origin) != 0)
        return -1;
    bson_iter_t i;
    if (bson_iter_init_find(&i, it->meta, "type") && BSON_ITER_HOLDS_UTF8(&i) &&
        strcmp(bson_iter_utf8(&i, NULL), "view") == 0)
        it->kind = RK_VIEW;
    return 0;
}

static char *read_text(const char *path, bool gzip)
{
    tool_stream_t *s = tool_stream_open(path, false, gzip);
    if (s == NULL)
        return NULL;
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 1 >= cap)
            buf = realloc(buf, cap *= 2);
        int64_t n = tool_stream_read_some(s, buf + len, cap - len - 1);
        if (n < 0) {
            free(buf);
            tool_stream_close(s);
            return NULL;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    tool_stream_close(s);
    return buf;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The entries of a directory, sorted. */
static int list_dir(const char *path, tool_strs_t *out)
{
    DIR *d = opendir(path);
    if (d == NULL)
        return tool_err("cannot read %s: %s", path, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            tool_strs_push(out, e->d_name);
    closedir(d);
    qsort(out->v, (size_t)out->n, sizeof(char *), cmp_str);
    return 0;
}

/* One file of a database directory. */
static int add_file(restore_t *r, const char *db, const char *dir, const char *name)
{
    char path[4096], coll[512], base[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    bool gz = ends_with(name, ".gz");
    snprintf(base, sizeof(base), "%.*s", (int)(strlen(name) - (gz ? 3 : 0)), name);
    bool is_meta = ends_with(base, ".metadata.json"), is_bson = ends_with(base, ".bson");
    if (!is_meta && !is_bson)
        return 0;
    base[strlen(base) - (is_meta ? 14 : 5)] = '\0';
    dump_unescape_name(base, coll, sizeof(coll));
    if (strcmp(coll, "$admin.system.version") == 0 ||
        (strcmp(db, "admin") == 0 && strcmp(coll, "system.version") == 0))
        return 0;
    rintent_t *it = find_intent(r, db, coll, true);
    if (is_bson) {
        free(it->bson_path);
        it->bson_path = strdup(path);
        it->gzip = gz;
        struct stat st;
        it->expect_bytes = !gz && stat(path, &st) == 0 ? (int64_t)st.st_size : 0;
        return 0;
    }
    char *text = read_text(path, gz);
    if (text == NULL)
        return -1;
    int rc = set_meta(it, text, path);
    free(text);
    return rc;
}

static int scan_db_dir(restore_t *r, const char *db, const char *dir)
{
    tool_strs_t names = {0};
    int rc = list_dir(dir, &names);
    for (int i = 0; i < names.n && rc == 0; i++)
        rc = add_file(r, db, dir, names.v[i]);
    tool_strs_free(&names);
    return rc;
}

static int scan_source(restore_t *r, const char *src)
{
    struct stat st;
    if (stat(src, &st) != 0)
        return tool_err("cannot restore from %s: %s", src, strerror(errno));
    if (S_ISREG(st.st_mode)) {
        const char *slash = strrchr(src, '/');
        const char *name = slash ? slash + 1 : src;
        if (!ends_with(name, ".bson") && !ends_with(name, ".bson.gz"))
            return tool_err("%s is not a .bson file (for an archive use --archive=%s)", src,
                            src);
        if (r->o.db == NULL)
            return tool_err("restoring the file %s needs --db", src);
        char dir[4096], coll[512];
        snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - src) : 1, slash ? src : ".");
        if (add_file(r, r->o.db, dir, name) != 0)
            return -1;
        rintent_t *it = &r->in[r->n - 1];
        /* its metadata, when it sits beside it */
        snprintf(coll, sizeof(coll), "%s", name);
        coll[strlen(coll) - (ends_with(name, ".gz") ? 8 : 5)] = '\0';
        char meta[4800];
        snprintf(meta, sizeof(meta), "%s/%s.metadata.json", dir, coll);
        if (stat(meta, &st) == 0) {
            char *text = read_text(meta, false);
            if (text == NULL || set_meta(it, text, meta) != 0) {
                free(text);
                return -1;
            }
            free(text);
        }
        if (r->o.coll != NULL)
            snprintf(it->coll, sizeof(it->coll), "%s", r->o.coll);
        return 0;
    }
    if (!S_ISDIR(st.st_mode))
        return tool_err("cannot restore from %s: not a file or a directory", src);
    tool_strs_t names = {0};
    if (list_dir(src, &names) != 0)
        return -1;
    bool files = false;
    for (int i = 0; i < names.n; i++) {
        if (strcmp(names.v[i], "oplog.bson") == 0 || strcmp(names.v[i], "oplog.bson.gz") == 0) {
            if (r->oplog_path == NULL && r->o.oplog_replay) { /* a whole dump's oplog */
                char path[4096];
                snprintf(path, sizeof(path), "%s/%s", src, names.v[i]);
                r->oplog_path = strdup(path);
                r->oplog_gzip = ends_with(names.v[i], ".gz");
            }
            continue;
        }
        files = files || ends_with(names.v[i], ".bson") || ends_with(names.v[i], ".bson.gz") ||
                ends_with(names.v[i], ".metadata.json") ||
                ends_with(names.v[i], ".metadata.json.gz");
    }
    int rc = 0;
    if (files) {
        if (r->o.db == NULL)
            rc = tool_err("%s holds one database's files: name the database with --db", src);
        else
            rc = scan_db_dir(r, r->o.db, src);
    } else {
        for (int i = 0; i < names.n && rc == 0; i++) {
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", src, names.v[i]);
            if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
                rc = scan_db_dir(r, names.v[i], path);
        }
    }
    tool_strs_free(&names);
    if (rc == 0 && r->n == 0)
        tool_log("warning: %s holds nothing to restore", src);
    return rc;
}

/* Selection and target names. */
static int select_intents(restore_t *r, bool single_db_source)
{
    for (int i = 0; i < r->n; i++) {
        rintent_t *it = &r->in[i];
        bool scoped = it->coll[0] == '$';
        if (scoped) {
            it->selected = r->o.users_roles && (r->o.db == NULL || single_db_source ||
                                                strcmp(it->db, r->o.db) == 0);
        } else if (single_db_source) {
            it->selected = r->o.coll == NULL || strcmp(it->coll, r->o.coll) == 0 ||
                           r->n == 1;
            it->selected = it->selected && tool_ns_selected(&r->o.ns, it->db, it->coll);
        } else {
            it->selected = (r->o.db == NULL || strcmp(it->db, r->o.db) == 0) &&
                           (r->o.coll == NULL || strcmp(it->coll, r->o.coll) == 0) &&
                           tool_ns_selected(&r->o.ns, it->db, it->coll);
        }
        char full[512];
        if (scoped) {
            snprintf(it->tdb, sizeof(it->tdb), "%s", it->db);
            snprintf(it->tcoll, sizeof(it->tcoll), "%s", it->coll);
            continue;
        }
        if (tool_ns_rename(&r->o.ns, it->db, it->coll, full, sizeof(full)) != 0)
            return tool_err("the new name of %s.%s is too long", it->db, it->coll);
        tool_ns_split(full, it->tdb, sizeof(it->tdb), it->tcoll, sizeof(it->tcoll));
        if (it->selected && (it->kind == RK_USERS || it->kind == RK_ROLES) &&
            strcmp(full, strcmp(it->coll, "system.users") == 0 ? "admin.system.users"
                                                               : "admin.system.roles") != 0)
            return tool_err("%s.%s cannot be renamed", it->db, it->coll);
    }
    return 0;
}

static void report(restore_t *r, bool failed)
{
    int64_t docs = 0, bad = 0;
    for (int i = 0; i < r->n; i++)
        if (r->in[i].selected) {
            docs += r->in[i].docs;
            bad += r->in[i].failed;
        }
    if (failed) {
        fprintf(stderr, "%s: the restore did not finish:\n", tool_prog);
        static const char *const what[] = {"not restored", "partly restored", "restored",
                                           "failed"};
        for (int s = RS_FAILED; s >= RS_PENDING; s--)
            for (int i = 0; i < r->n; i++) {
                rintent_t *it = &r->in[i];
                if (!it->selected || (int)it->state != s)
                    continue;
                fprintf(stderr, "  %-15s %s.%s (%lld documents)\n", what[s], it->tdb,
                        it->tcoll, (long long)it->docs);
            }
    }
    fprintf(stderr, "%s: %lld document(s) restored successfully. %lld document(s) failed to "
                    "restore.\n",
            tool_prog, (long long)docs, (long long)bad);
}

/* Create every selected collection (views come at the end). */
static int create_all(restore_t *r, rkind_t kind)
{
    int rc = 0;
    for (int i = 0; i < r->n; i++) {
        rintent_t *it = &r->in[i];
        if (!it->selected || it->kind != kind || it->state != RS_PENDING)
            continue;
        if (r->o.dry_run) {
            tool_log("would restore %s.%s to %s.%s", it->db, it->coll, it->tdb, it->tcoll);
            continue;
        }
        if (restore_create(r, it) != 0) {
            rc = -1;
            if (r->o.stop_on_error)
                return -1;
        }
    }
    return rc;
}

static void start_progress(rintent_t *it)
{
    char name[800];
    snprintf(name, sizeof(name), "%s.%s", it->tdb, it->tcoll);
    tool_progress_start(&it->progress, strdup(name), 0);
    it->progress.total_bytes = it->expect_bytes;
}

static int finish(restore_t *r, rintent_t *it)
{
    int rc = restore_finish(r, it);
    if (rc == 0 && it->kind == RK_COLLECTION)
        tool_progress_done(&it->progress, "finished restoring ");
    return rc;
}

/* mongodump's time-series data is mongod's bucket documents; Sable stores measurements. */
static int refuse_buckets(restore_t *r)
{
    for (int i = 0; i < r->n; i++)
        if (r->in[i].selected && strncmp(r->in[i].coll, "system.buckets.", 15) == 0)
            return tool_err("%s.%s holds mongod's time-series buckets, which Sable cannot "
                            "restore (it stores measurements); export the collection with "
                            "sable-export/mongoexport and import it instead",
                            r->in[i].db, r->in[i].coll);
    return 0;
}

/* One namespace's file of a dump directory: its documents, then its indexes (a
   collection) or the users or roles written.  0 or -1. */
static int restore_file(restore_t *r, rintent_t *it)
{
    start_progress(it);
    int frc = 0;
    if (it->bson_path != NULL) {
        tool_bson_reader_t br = {0};
        br.in = tool_stream_open(it->bson_path, false, it->gzip);
        if (br.in == NULL)
            frc = -1;
        bson_t doc;
        int n;
        while (frc == 0 && (n = tool_bson_next(&br, &doc)) != 0) {
            if (n < 0)
                frc = -1;
            else
                frc = restore_doc(r, it, &doc);
        }
        tool_bson_reader_free(&br);
        tool_stream_close(br.in);
    }
    if (frc == 0)
        frc = it->kind == RK_COLLECTION ? finish(r, it) : restore_users(r, it);
    else if (it->state != RS_FAILED)
        restore_finish(r, it), it->state = RS_FAILED;
    return frc;
}

/* --numParallelCollections: workers take a dump directory's collections one by one,
   each worker with a connection of its own for its commands (the inserts have their
   own connections anyway).  An intent belongs to the one worker that took it. */
typedef struct par {
    restore_t *r;
    pthread_mutex_t mu;
    int next;
    bool failed, stop;
} par_t;

static void *par_worker(void *arg)
{
    par_t *p = arg;
    restore_t w = *p->r; /* the same options and intents; its own client */
    w.c = tool_connect(&w.conn);
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->next < w.n && (w.in[p->next].kind != RK_COLLECTION ||
                                 !w.in[p->next].selected || w.in[p->next].state != RS_PARTIAL))
            p->next++;
        int i = p->stop || p->next >= w.n ? -1 : p->next++;
        if (i >= 0 && w.c == NULL) { /* tool_connect said why */
            p->failed = p->stop = true;
            i = -1;
        }
        pthread_mutex_unlock(&p->mu);
        if (i < 0)
            break;
        if (restore_file(&w, &w.in[i]) != 0) {
            pthread_mutex_lock(&p->mu);
            p->failed = true;
            p->stop = p->stop || w.o.stop_on_error;
            pthread_mutex_unlock(&p->mu);
        }
    }
    if (w.c != NULL)
        mongoc_client_destroy(w.c);
    return NULL;
}

/* Restore the collections jobs at a time; 0 or -1 (some failed). */
static int restore_parallel(restore_t *r, int jobs)
{
    par_t p = {.r = r};
    pthread_mutex_init(&p.mu, NULL);
    pthread_t t[64];
    int started = 0;
    for (; started < jobs && started < 64; started++)
        if (pthread_create(&t[started], NULL, par_worker, &p) != 0)
            break;
    if (started == 0)
        par_worker(&p);
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    pthread_mutex_destroy(&p.mu);
    return p.failed ? -1 : 0;
}

static int restore_dir(restore_t *r)
{
    if (refuse_buckets(r) != 0)
        return -1;
    int rc = create_all(r, RK_COLLECTION);
    if (rc != 0 && r->o.stop_on_error)
        return -1;
    int jobs = 0; /* collections with documents to restore, at most -j */
    for (int i = 0; i < r->n; i++)
        jobs += r->in[i].selected && r->in[i].kind == RK_COLLECTION &&
                r->in[i].state == RS_PARTIAL && !r->o.dry_run;
    if (jobs > r->o.jobs)
        jobs = (int)r->o.jobs;
    if (jobs > 1 && restore_parallel(r, jobs) != 0) {
        rc = -1;
        if (r->o.stop_on_error)
            return -1;
    }
    rkind_t order[3] = {RK_COLLECTION, RK_ROLES, RK_USERS};
    for (int k = 0; k < 3; k++) {
        if (k == 1 && create_all(r, RK_VIEW) != 0)
            rc = -1;
        for (int i = 0; i < r->n; i++) {
            rintent_t *it = &r->in[i];
            if (!it->selected || it->kind != order[k] || r->o.dry_run)
                continue;
            if (it->kind != RK_COLLECTION && restore_create(r, it) != 0)
                return -1;
            if (it->state != RS_PARTIAL)
                continue;
            if (it->kind == RK_COLLECTION && jobs > 1)
                continue; /* done above, in parallel */
            if (restore_file(r, it) != 0) {
                rc = -1;
                if (r->o.stop_on_error)
                    return -1;
            }
        }
    }
    if (rc != 0 || !r->o.oplog_replay || r->o.dry_run)
        return rc;
    tool_stream_t *in = tool_stream_open(r->oplog_path, false, r->oplog_gzip);
    if (in == NULL)
        return -1;
    rc = restore_oplog_replay(r, in, r->oplog_path);
    tool_stream_close(in);
    return rc;
}

static bool is_oplog_ns(const char *db, const char *coll)
{
    return db[0] == '\0' && strcmp(coll, "oplog") == 0;
}

/* An archive's oplog arrives after the collections but must be replayed after the
   views, users and roles too: it waits in a temporary file. */
typedef struct oplog_spool {
    char path[4096];
    tool_stream_t *s;
} oplog_spool_t;

static int spool_open(oplog_spool_t *sp)
{
    const char *dir = getenv("TMPDIR");
    snprintf(sp->path, sizeof(sp->path), "%s/sable-restore-oplog-XXXXXX",
             dir && dir[0] ? dir : "/tmp");
    int fd = mkstemp(sp->path);
    if (fd < 0)
        return tool_err("cannot create a temporary file for the oplog in %s: %s",
                        dir && dir[0] ? dir : "/tmp", strerror(errno));
    close(fd);
    sp->s = tool_stream_open(sp->path, true, false);
    return sp->s == NULL ? -1 : 0;
}

static void spool_close(oplog_spool_t *sp)
{
    if (sp->s != NULL)
        tool_stream_close(sp->s);
    sp->s = NULL;
    if (sp->path[0])
        unlink(sp->path);
    sp->path[0] = '\0';
}

static int restore_archive(restore_t *r)
{
    arch_reader_t ar = {0};
    ar.in = tool_stream_open(r->o.archive, false, r->o.gzip);
    if (ar.in == NULL)
        return -1;
    bool has_oplog = false;
    oplog_spool_t spool = {0};
    uint64_t oplog_crc = 0;
    int rc = arch_read_prelude(&ar);
    for (int i = 0; rc == 0 && i < ar.n_entries; i++) {
        arch_entry_t *e = &ar.entries[i];
        if (is_oplog_ns(e->db, e->coll)) {
            has_oplog = true;
            continue;
        }
        rintent_t *it = find_intent(r, e->db, e->coll, true);
        it->expect_bytes = e->size;
        if (e->metadata[0] && set_meta(it, e->metadata, "the archive") != 0)
            rc = -1;
    }
    if (rc == 0)
        rc = select_intents(r, false);
    if (rc == 0)
        rc = refuse_buckets(r);
    if (rc == 0)
        rc = create_all(r, RK_COLLECTION);
    for (int i = 0; rc == 0 && i < r->n; i++)
        if (r->in[i].selected && (r->in[i].kind == RK_USERS || r->in[i].kind == RK_ROLES))
            rc = restore_create(r, &r->in[i]);
    for (int i = 0; i < r->n; i++)
        start_progress(&r->in[i]);
    arch_event_t ev;
    int n = 0;
    bool corrupt = false;
    if (rc == 0 && r->o.oplog_replay && !has_oplog)
        rc = tool_err("--oplogReplay: the archive holds no oplog (dump it with --oplog)");
    if (rc == 0 && r->o.oplog_replay && !r->o.dry_run && spool_open(&spool) != 0)
        rc = -1;
    while ((rc == 0 || !r->o.stop_on_error) && !corrupt && (n = arch_next(&ar, &ev)) > 0) {
        if (has_oplog && is_oplog_ns(ev.db, ev.coll)) { /* kept aside, replayed at the end */
            if (ev.kind == ARCH_DOC) {
                oplog_crc = arch_crc64(oplog_crc, bson_get_data(&ev.doc), ev.doc.len);
                if (spool.s != NULL &&
                    tool_stream_write(spool.s, bson_get_data(&ev.doc), ev.doc.len) != 0)
                    rc = -1;
            } else if ((uint64_t)ev.crc != oplog_crc) {
                corrupt = true;
                tool_err("corrupt archive: the checksum of the oplog does not match its entries");
            }
            continue;
        }
        rintent_t *it = find_intent(r, ev.db, ev.coll, false);
        if (it == NULL) {
            corrupt = true;
            tool_err("corrupt archive: data for %s.%s, which its prelude does not list", ev.db,
                     ev.coll);
            break;
        }
        if (ev.kind == ARCH_DOC) {
            it->crc = arch_crc64(it->crc, bson_get_data(&ev.doc), ev.doc.len);
            if (it->selected && it->state == RS_PARTIAL && !r->o.dry_run &&
                restore_doc(r, it, &ev.doc) != 0)
                rc = -1;
            continue;
        }
        if ((uint64_t)ev.crc != it->crc) {
            corrupt = true;
            if (it->selected && it->state == RS_PARTIAL) {
                restore_finish(r, it); /* its documents are in, but it is not whole */
                it->state = RS_PARTIAL;
            }
            tool_err("corrupt archive: the checksum of %s.%s does not match its documents",
                     ev.db, ev.coll);
            break;
        }
        if (!it->selected || it->state != RS_PARTIAL || r->o.dry_run)
            continue;
        if ((it->kind == RK_COLLECTION ? finish(r, it) : 0) != 0)
            rc = -1;
    }
    if (n < 0)
        corrupt = true;
    if (corrupt) {
        for (int i = 0; i < r->n; i++) /* send what arrived intact, but never call it done */
            if (r->in[i].selected && r->in[i].state == RS_PARTIAL &&
                r->in[i].kind == RK_COLLECTION && r->in[i].bulk != NULL) {
                restore_finish(r, &r->in[i]);
                r->in[i].state = RS_PARTIAL;
            }
        tool_stream_close(ar.in);
        arch_reader_free(&ar);
        spool_close(&spool);
        return -1;
    }
    for (int i = 0; i < r->n; i++) {
        rintent_t *it = &r->in[i];
        if (it->selected && it->kind == RK_COLLECTION && it->state == RS_PARTIAL) {
            /* an empty collection has an end and no documents; none at all: incomplete */
            tool_err("the archive ends before the data of %s.%s is complete", it->db, it->coll);
            rc = -1;
        }
    }
    if (create_all(r, RK_VIEW) != 0)
        rc = -1;
    rkind_t order[2] = {RK_ROLES, RK_USERS};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < r->n; i++)
            if (r->in[i].selected && r->in[i].kind == order[k] && !r->o.dry_run &&
                r->in[i].state == RS_PARTIAL && restore_users(r, &r->in[i]) != 0)
                rc = -1;
    tool_stream_close(ar.in);
    arch_reader_free(&ar);
    if (rc == 0 && spool.s != NULL) {
        if (tool_stream_close(spool.s) != 0)
            rc = -1;
        spool.s = NULL;
        tool_stream_t *in = rc == 0 ? tool_stream_open(spool.path, false, false) : NULL;
        rc = in == NULL ? -1 : restore_oplog_replay(r, in, "the archive");
        if (in != NULL)
            tool_stream_close(in);
    }
    spool_close(&spool);
    return rc;
}

int main(int argc, char **argv)
{
    restore_t r;
    memset(&r, 0, sizeof(r));
    ropts_t *o = &r.o;
    tool_strs_t pos = {0};
    bool convert_legacy = false;
    o->jobs = 4; /* mongorestore's default */
    const tool_opt_t opts[] = {
        {"db", 'd', TO_STR, &o->db, "database to restore into (or to select)"},
        {"collection", 'c', TO_STR, &o->coll, "collection to restore into (or to select)"},
        {"dir", 0, TO_STR, &o->dir, "the dump directory (as the positional argument)"},
        {"archive", 0, TO_OPTSTR, &o->archive, "read an archive (stdin without =FILE)"},
        {"gzip", 0, TO_FLAG, &o->gzip, "the archive (or the files) are gzip-compressed"},
        {"nsInclude", 0, TO_MULTI, &o->ns.include, "only namespaces matching (* wildcard)"},
        {"nsExclude", 0, TO_MULTI, &o->ns.exclude, "skip namespaces matching (* wildcard)"},
        {"nsFrom", 0, TO_MULTI, &o->ns.from, "rename from this pattern ($var$ captures)"},
        {"nsTo", 0, TO_MULTI, &o->ns.to, "... to this one"},
        {"drop", 0, TO_FLAG, &o->drop, "drop each collection before restoring it"},
        {"noIndexRestore", 0, TO_FLAG, &o->no_index, "do not build the dumped indexes"},
        {"noOptionsRestore", 0, TO_FLAG, &o->no_options, "create collections without options"},
        {"stopOnError", 0, TO_FLAG, &o->stop_on_error, "stop at the first failed insert"},
        {"maintainInsertionOrder", 0, TO_FLAG, &o->keep_order, "insert in the dump's order"},
        {"restoreDbUsersAndRoles", 0, TO_FLAG, &o->users_roles, "restore a database's users"},
        {"bypassDocumentValidation", 0, TO_FLAG, &o->bypass_validation, "skip validators"},
        {"dryRun", 0, TO_FLAG, &o->dry_run, "say what would be restored, change nothing"},
        {"writeConcern", 0, TO_STR, &r.conn.write_concern, "e.g. majority, 1, '{w:1,j:true}'"},
        {"numParallelCollections", 'j', TO_INT, &o->jobs,
         "collections of a dump directory restored at once (default 4)"},
        {"numInsertionWorkersPerCollection", 0, TO_INT, &o->workers,
         "connections inserting into one collection at once (default 2; 1 with "
         "--maintainInsertionOrder or a capped collection)"},
        {"batchSize", 0, TO_INT, &o->batch, "documents per insert (default 1000)"},
        {"preserveUUID", 0, TO_FLAG, &o->preserve_uuid,
         "with --drop: collections keep their dumped UUIDs"},
        {"oplogReplay", 0, TO_FLAG, &o->oplog_replay,
         "then replay the dump's oplog: the state at the dump's end"},
        {"oplogLimit", 0, TO_STR, &o->oplog_limit,
         "with --oplogReplay: only entries before seconds[:ordinal]"},
        {"oplogFile", 0, TO_STR, &o->oplog_file, "with --oplogReplay: the oplog to replay"},
        {"convertLegacyIndexes", 0, TO_FLAG, &convert_legacy, NULL},
        {NULL, 0, 0, NULL, NULL},
    };
    int rc = tool_opts_parse("sable-restore", usage, argc, argv, opts, &r.conn, &pos);
    if (rc != 0)
        return rc > 0 ? 0 : 1;
    if (o->jobs < 1) {
        tool_err("--numParallelCollections must be at least 1");
        return 1;
    }
    if ((o->oplog_limit != NULL || o->oplog_file != NULL) && !o->oplog_replay) {
        tool_err("--oplogLimit and --oplogFile need --oplogReplay");
        return 1;
    }
    uint32_t lim_t, lim_i;
    if (o->oplog_limit != NULL && restore_parse_ts(o->oplog_limit, &lim_t, &lim_i) != 0)
        return 1;
    if (o->oplog_replay && (o->db != NULL || o->coll != NULL || o->ns.from.n > 0)) {
        tool_err("--oplogReplay restores a whole dump to one point in time: not with --db, "
                 "--collection or --nsFrom/--nsTo (--nsInclude/--nsExclude select)");
        return 1;
    }
    if (o->oplog_file != NULL) {
        r.oplog_path = strdup(o->oplog_file);
        r.oplog_gzip = ends_with(o->oplog_file, ".gz");
    }
    if (o->preserve_uuid && !o->drop) {
        tool_err("--preserveUUID needs --drop (a collection that exists keeps its own UUID)");
        return 1;
    }
    if (pos.n > 1 || (pos.n == 1 && o->dir != NULL))
        {
        tool_err("give one dump directory or file");
        return 1;
    }
    if (pos.n == 1 && o->archive != NULL)
        {
        tool_err("--archive and a positional directory cannot be used together");
        return 1;
    }
    if (o->coll != NULL && o->db == NULL)
        {
        tool_err("--collection needs --db");
        return 1;
    }
    if (tool_ns_check(&o->ns) != 0 || tool_write_concern(&r.conn, &r.wc) != 0)
        return 1;
    const char *src = o->dir ? o->dir : pos.n ? pos.v[0] : "dump";
    if (o->archive == NULL) { /* read the directory before connecting: errors come first */
        if (scan_source(&r, src) != 0)
            return 1;
        struct stat st;
        stat(src, &st);
        bool db_dir = false;
        tool_strs_t names = {0};
        if (S_ISDIR(st.st_mode) && list_dir(src, &names) == 0) {
            for (int i = 0; i < names.n; i++)
                db_dir = db_dir || ends_with(names.v[i], ".bson") ||
                         ends_with(names.v[i], ".bson.gz") ||
                         ends_with(names.v[i], ".metadata.json") ||
                         ends_with(names.v[i], ".metadata.json.gz");
            tool_strs_free(&names);
        }
        if (select_intents(&r, S_ISREG(st.st_mode) || db_dir) != 0)
            return 1;
        if (o->oplog_replay && r.oplog_path == NULL) {
            tool_err("--oplogReplay: %s has no oplog.bson (dump with --oplog, or name one with "
                     "--oplogFile)",
                     src);
            return 1;
        }
    }
    r.c = tool_connect(&r.conn);
    if (r.c == NULL)
        return 1;
    double start = tool_now();
    rc = o->archive != NULL ? restore_archive(&r) : restore_dir(&r);
    double secs = tool_now() - start;
    int64_t bytes = 0;
    for (int i = 0; i < r.n; i++)
        bytes += r.in[i].selected ? r.in[i].bytes : 0;
    if (rc == 0)
        tool_log("restored %.1f MB in %.2fs (%.1f MB/s)", bytes / 1e6, secs,
                 secs > 0 ? bytes / 1e6 / secs : 0);
    report(&r, rc != 0);
    for (int i = 0; i < r.n; i++) {
        bson_destroy(r.in[i].meta);
        bson_destroy(r.in[i].pending);
        free(r.in[i].bson_path);
    }
    free(r.in);
    free(r.oplog_path);
    if (r.wc)
        mongoc_write_concern_destroy(r.wc);
    mongoc_client_destroy(r.c);
    tool_strs_free(&pos);
    return rc == 0 ? 0 : 1;
}
