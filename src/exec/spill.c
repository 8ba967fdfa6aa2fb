/*
 * spill.c: the memory limits of blocking work (aggregation stages and
 * find's in-memory sort), their server parameters, and the external sorter
 * that lets $sort, find's sort and $group spill to disk.
 *
 * What must stay true:
 *  - Spill files live in <dbpath>/_tmp and are unlinked as soon as they are
 *    created, so they vanish when the operation ends or the process dies;
 *    start-up empties _tmp of anything older (sbl_spill_init).
 *  - The sorter is stable: records that compare equal come out in the order
 *    they were added (runs are merged with ties going to the earlier run).
 *  - Limits are read once per use through atomics: setParameter changes
 *    them at run time without locks.
 */
#include "exec/exec.h"
#include "server/server.h"

#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_LIMIT ((long long)100 * 1024 * 1024)

/* ---- parameters --------------------------------------------------------------------------- */

typedef struct param {
    const char *name;
    bool is_bool;
    long long dflt;
    _Atomic long long v;
} param_t;

/* indexed by sbl_mem_limit_t, then allowDiskUseByDefault */
static param_t params[] = {
    [SBL_LIM_SORT] = {"internalQueryMaxBlockingSortMemoryUsageBytes", false, DEFAULT_LIMIT, DEFAULT_LIMIT},
    [SBL_LIM_GROUP] = {"internalDocumentSourceGroupMaxMemoryBytes", false, DEFAULT_LIMIT, DEFAULT_LIMIT},
    [SBL_LIM_PUSH] = {"internalQueryMaxPushBytes", false, DEFAULT_LIMIT, DEFAULT_LIMIT},
    [SBL_LIM_ADDTOSET] = {"internalQueryMaxAddToSetBytes", false, DEFAULT_LIMIT, DEFAULT_LIMIT},
    [SBL_LIM_FACET] = {"internalQueryFacetMaxOutputDocSizeBytes", false, DEFAULT_LIMIT, DEFAULT_LIMIT},
    [SBL_LIM_GRAPH] = {"internalDocumentSourceGraphLookupMaxMemoryBytes", false, DEFAULT_LIMIT, DEFAULT_LIMIT},
    [SBL_LIM_WINDOW] = {"internalDocumentSourceSetWindowFieldsMaxMemoryBytes", false, DEFAULT_LIMIT, DEFAULT_LIMIT},
    [SBL_LIM_DENSIFY] = {"internalDocumentSourceDensifyMaxMemoryBytes", false, DEFAULT_LIMIT, DEFAULT_LIMIT},
    [SBL_LIM_COUNT] = {"allowDiskUseByDefault", true, 1, 1},
};
#define NPARAMS (sizeof(params) / sizeof(params[0]))
#define P_DISK_DEFAULT SBL_LIM_COUNT

static _Atomic long long n_sort_spills, n_sort_bytes, n_sort_keys;
static _Atomic long long n_group_spills, n_group_records, n_group_storage;

static param_t *find_param(const char *name)
{
    for (size_t i = 0; i < NPARAMS; i++)
        if (strcmp(params[i].name, name) == 0)
            return &params[i];
    return NULL;
}

/* Parse a value as setParameter (BSON) or --setParameter (a string) gives it. */
static int parse_value(const param_t *p, const bson_iter_t *it, long long *out, sbl_err_t *err)
{
    if (p->is_bool) {
        if (BSON_ITER_HOLDS_UTF8(it)) {
            const char *s = bson_iter_utf8(it, NULL);
            if (strcmp(s, "true") == 0 || strcmp(s, "1") == 0)
                *out = 1;
            else if (strcmp(s, "false") == 0 || strcmp(s, "0") == 0)
                *out = 0;
            else
                return sbl_err_set(err, SBL_E_BadValue, "Invalid value for %s: '%s'", p->name, s);
            return 0;
        }
        if (!BSON_ITER_HOLDS_BOOL(it) && !BSON_ITER_HOLDS_NUMBER(it))
            return sbl_err_set(err, SBL_E_BadValue, "Invalid value for %s: expected a boolean",
                               p->name);
        *out = bson_iter_as_bool(it);
        return 0;
    }
    long long v;
    if (BSON_ITER_HOLDS_UTF8(it)) {
        const char *s = bson_iter_utf8(it, NULL);
        char *end = NULL;
        errno = 0;
        v = strtoll(s, &end, 10);
        if (errno != 0 || end == s || *end != '\0')
            return sbl_err_set(err, SBL_E_BadValue, "Invalid value for %s: '%s'", p->name, s);
    } else if (BSON_ITER_HOLDS_NUMBER(it)) {
        v = bson_iter_as_int64(it);
    } else {
        return sbl_err_set(err, SBL_E_BadValue, "Invalid value for %s: expected a number",
                           p->name);
    }
    if (v <= 0)
        return sbl_err_set(err, SBL_E_BadValue, "Invalid value for %s: %lld is not greater than 0",
                           p->name, v);
    *out = v;
    return 0;
}

static void append_param(bson_t *r, const char *key, const param_t *p, long long v)
{
    if (p->is_bool)
        bson_append_bool(r, key, -1, v != 0);
    else
        bson_append_int64(r, key, -1, v);
}

/* Remove what an earlier process left in dir (a crash between create and unlink). */
static void clean_tmp(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[1400];
    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
}

static void tmp_dir(char *dir, size_t len)
{
    const sbl_options_t *o = sbl_server_options();
    snprintf(dir, len, "%s/_tmp", o != NULL && o->dbpath != NULL ? o->dbpath : "/tmp");
}

int sbl_spill_init(sbl_err_t *err)
{
    const sbl_options_t *o = sbl_server_options();
    char dir[1100];
    for (size_t i = 0; o != NULL && i < NPARAMS; i++) {
        bson_iter_t it;
        long long v;
        if (!bson_iter_init_find(&it, &o->parameters, params[i].name))
            continue;
        SBL_RET(parse_value(&params[i], &it, &v, err));
        atomic_store(&params[i].v, v);
    }
    if (o != NULL && o->dbpath != NULL) {
        tmp_dir(dir, sizeof(dir));
        clean_tmp(dir);
    }
    return 0;
}

int sbl_spill_set_parameter(const char *name, const bson_iter_t *it, bson_t *reply, sbl_err_t *err)
{
    param_t *p = find_param(name);
    long long v;
    if (p == NULL)
        return -1;
    SBL_RET(parse_value(p, it, &v, err));
    append_param(reply, "was", p, atomic_exchange(&p->v, v));
    return 0;
}

bool sbl_spill_append_parameter(bson_t *r, const char *name)
{
    const param_t *p = find_param(name);
    if (p == NULL)
        return false;
    append_param(r, name, p, atomic_load(&p->v));
    return true;
}

void sbl_spill_append_metrics(bson_t *metrics)
{
    bson_t q, d;
    bson_append_document_begin(metrics, "query", -1, &q);
    bson_append_document_begin(&q, "group", -1, &d);
    bson_append_int64(&d, "spills", -1, atomic_load(&n_group_spills));
    bson_append_int64(&d, "spilledDataStorageSize", -1, atomic_load(&n_group_storage));
    bson_append_int64(&d, "spilledRecords", -1, atomic_load(&n_group_records));
    bson_append_document_end(&q, &d);
    bson_append_document_begin(&q, "sort", -1, &d);
    bson_append_int64(&d, "spillToDisk", -1, atomic_load(&n_sort_spills));
    bson_append_int64(&d, "totalBytesSorted", -1, atomic_load(&n_sort_bytes));
    bson_append_int64(&d, "totalKeysSorted", -1, atomic_load(&n_sort_keys));
    bson_append_document_end(&q, &d);
    bson_append_document_end(metrics, &q);
}

void sbl_spill_count_group(size_t records, size_t bytes)
{
    atomic_fetch_add(&n_group_spills, 1);
    atomic_fetch_add(&n_group_records, (long long)records);
    atomic_fetch_add(&n_group_storage, (long long)bytes);
}

size_t sbl_mem_limit(sbl_mem_limit_t which)
{
    return (size_t)atomic_load(&params[which].v);
}

size_t sbl_mem_sort_limit(void)
{
    return sbl_mem_limit(SBL_LIM_SORT);
}

bool sbl_mem_disk_ok(int allow_disk)
{
    return allow_disk > 0 || (allow_disk < 0 && atomic_load(&params[P_DISK_DEFAULT].v) != 0);
}

int sbl_mem_error(sbl_mem_limit_t which, sbl_err_t *err)
{
    if (which == SBL_LIM_SORT)
        return sbl_err_set(err, SBL_E_QueryExceededMemoryLimitNoDiskUseAllowed,
                           "Sort exceeded memory limit of %zu bytes, but did not opt in to "
                           "external sorting.",
                           sbl_mem_limit(SBL_LIM_SORT));
    return sbl_err_set(err, SBL_E_QueryExceededMemoryLimitNoDiskUseAllowed,
                       "Exceeded memory limit for $group, but didn't allow external sort. Pass "
                       "allowDiskUse:true to opt in.");
}

/* ---- the external sorter ------------------------------------------------------------------- */

typedef struct rec {
    bson_t *doc;
    int32_t tag;
    size_t seq;
} rec_t;

typedef struct run {
    off_t off, end; /* what is left of the run in the file */
    rec_t head;     /* head.doc NULL: exhausted */
} run_t;

struct sbl_sorter {
    sbl_sorter_cmp_fn cmp;
    const void *arg;
    size_t limit; /* buffered bytes beyond which add() spills */
    rec_t *buf;
    size_t n, cap, bytes, seq, i;
    bool sorted;
    int fd; /* -1: nothing spilled */
    off_t size;
    run_t *runs; /* the buffer, once sorted, is merged as one more source */
    size_t nruns;
    size_t *heap; /* source indexes (nruns = the buffer), ordered by their heads */
    size_t nheap;
    bool merging;
    const char *what; /* counted as a sort spill when "sort" */
};

static _Thread_local const sbl_sorter_t *tls_sorter;

static int cmp_rec(const void *a, const void *b)
{
    const rec_t *x = a, *y = b;
    int r = tls_sorter->cmp(x->doc, y->doc, tls_sorter->arg);
    return r != 0 ? r : (x->seq < y->seq ? -1 : x->seq > y->seq);
}

sbl_sorter_t *sbl_sorter_new(sbl_sorter_cmp_fn cmp, const void *arg, size_t limit, bool is_sort)
{
    sbl_sorter_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        abort();
    s->cmp = cmp;
    s->arg = arg;
    s->limit = limit;
    s->fd = -1;
    s->what = is_sort ? "sort" : "group";
    return s;
}

static int open_file(sbl_sorter_t *s, sbl_err_t *err)
{
    char dir[1100], path[1200];
    tmp_dir(dir, sizeof(dir));
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return sbl_err_set(err, SBL_E_InternalError, "cannot create %s: %s", dir, strerror(errno));
    snprintf(path, sizeof(path), "%s/spill-%s-XXXXXX", dir, s->what);
    s->fd = mkstemp(path);
    if (s->fd < 0)
        return sbl_err_set(err, SBL_E_InternalError, "cannot create a spill file in %s: %s", dir,
                           strerror(errno));
    unlink(path); /* gone from the directory; the open file lives until close */
    return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n, off_t off, sbl_err_t *err)
{
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, off);
        if (w <= 0)
            return sbl_err_set(err, SBL_E_OutOfDiskSpace, "writing a spill file failed: %s",
                               w < 0 ? strerror(errno) : "short write");
        p += w;
        n -= (size_t)w;
        off += w;
    }
    return 0;
}

static void sort_buf(sbl_sorter_t *s)
{
    tls_sorter = s;
    if (s->n > 1)
        qsort(s->buf, s->n, sizeof(*s->buf), cmp_rec);
    s->sorted = true;
}

int sbl_sorter_spill(sbl_sorter_t *s, sbl_err_t *err)
{
    if (s->n == 0)
        return 0;
    if (s->fd < 0)
        SBL_RET(open_file(s, err));
    sort_buf(s);
    run_t r = {.off = s->size};
    int rc = 0;
    for (size_t i = 0; i < s->n; i++) {
        uint8_t tag[4];
        int32_t t = s->buf[i].tag;
        memcpy(tag, &t, 4);
        if (rc == 0 && (rc = write_all(s->fd, tag, 4, s->size, err)) == 0)
            rc = write_all(s->fd, bson_get_data(s->buf[i].doc), s->buf[i].doc->len, s->size + 4,
                           err);
        if (rc == 0)
            s->size += 4 + (off_t)s->buf[i].doc->len;
        bson_destroy(s->buf[i].doc);
    }
    if (strcmp(s->what, "sort") == 0) {
        atomic_fetch_add(&n_sort_spills, 1);
        atomic_fetch_add(&n_sort_keys, (long long)s->n);
        atomic_fetch_add(&n_sort_bytes, (long long)s->bytes);
    }
    s->n = s->bytes = 0;
    s->sorted = false;
    if (rc != 0)
        return rc;
    r.end = s->size;
    s->runs = realloc(s->runs, (s->nruns + 1) * sizeof(*s->runs));
    if (s->runs == NULL)
        abort();
    s->runs[s->nruns++] = r;
    return 0;
}

int sbl_sorter_add(sbl_sorter_t *s, bson_t *doc, int32_t tag, sbl_err_t *err)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 256;
        s->buf = realloc(s->buf, s->cap * sizeof(*s->buf));
        if (s->buf == NULL)
            abort();
    }
    s->buf[s->n++] = (rec_t){doc, tag, s->seq++};
    s->bytes += doc->len + sizeof(rec_t);
    if (s->bytes > s->limit)
        return sbl_sorter_spill(s, err);
    return 0;
}

size_t sbl_sorter_runs(const sbl_sorter_t *s)
{
    return s->nruns;
}

/* Read a run's next record into its head (head.doc NULL at the end). */
static int run_next(sbl_sorter_t *s, run_t *r, sbl_err_t *err)
{
    uint8_t hdr[8];
    r->head.doc = NULL;
    if (r->off >= r->end)
        return 0;
    if (pread(s->fd, hdr, 8, r->off) != 8)
        return sbl_err_set(err, SBL_E_InternalError, "short read from a spill file");
    uint32_t len = (uint32_t)hdr[4] | (uint32_t)hdr[5] << 8 | (uint32_t)hdr[6] << 16 |
                   (uint32_t)hdr[7] << 24;
    if (len < 5 || r->off + 4 + (off_t)len > r->end)
        return sbl_err_set(err, SBL_E_InternalError, "corrupt spill file");
    uint8_t *data = malloc(len);
    if (data == NULL)
        abort();
    if (pread(s->fd, data, len, r->off + 4) != (ssize_t)len) {
        free(data);
        return sbl_err_set(err, SBL_E_InternalError, "short read from a spill file");
    }
    int32_t tag;
    memcpy(&tag, hdr, 4);
    r->head.doc = bson_new_from_data(data, len);
    r->head.tag = tag;
    free(data);
    if (r->head.doc == NULL)
        return sbl_err_set(err, SBL_E_InternalError, "corrupt spill file");
    r->off += 4 + (off_t)len;
    return 0;
}

/* The head of source i: a run's, or the sorted buffer's next record. */
static const rec_t *head_of(const sbl_sorter_t *s, size_t i)
{
    if (i < s->nruns)
        return s->runs[i].head.doc != NULL ? &s->runs[i].head : NULL;
    return s->i < s->n ? &s->buf[s->i] : NULL;
}

/* Source a before source b?  Equal records: the earlier source (input order). */
static bool heap_less(const sbl_sorter_t *s, size_t a, size_t b)
{
    int r = s->cmp(head_of(s, a)->doc, head_of(s, b)->doc, s->arg);
    return r != 0 ? r < 0 : a < b;
}

static void heap_down(sbl_sorter_t *s, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < s->nheap && heap_less(s, s->heap[l], s->heap[m]))
            m = l;
        if (l + 1 < s->nheap && heap_less(s, s->heap[l + 1], s->heap[m]))
            m = l + 1;
        if (m == i)
            return;
        size_t t = s->heap[i];
        s->heap[i] = s->heap[m];
        s->heap[m] = t;
        i = m;
    }
}

static int start_merge(sbl_sorter_t *s, sbl_err_t *err)
{
    s->merging = true;
    sort_buf(s);
    s->i = 0;
    s->heap = calloc(s->nruns + 2, sizeof(*s->heap));
    if (s->heap == NULL)
        abort();
    for (size_t r = 0; r < s->nruns; r++)
        SBL_RET(run_next(s, &s->runs[r], err));
    for (size_t r = 0; r <= s->nruns; r++)
        if (head_of(s, r) != NULL)
            s->heap[s->nheap++] = r;
    for (size_t i = s->nheap / 2; i-- > 0;)
        heap_down(s, i);
    return 0;
}

int sbl_sorter_next(sbl_sorter_t *s, bson_t **docp, int32_t *tagp, sbl_err_t *err)
{
    *docp = NULL;
    if (!s->merging)
        SBL_RET(start_merge(s, err));
    if (s->nheap == 0)
        return 0;
    size_t src = s->heap[0];
    if (src < s->nruns) {
        *docp = s->runs[src].head.doc;
        if (tagp != NULL)
            *tagp = s->runs[src].head.tag;
        SBL_RET(run_next(s, &s->runs[src], err));
    } else {
        *docp = s->buf[s->i].doc;
        if (tagp != NULL)
            *tagp = s->buf[s->i].tag;
        s->buf[s->i++].doc = NULL;
    }
    if (head_of(s, src) == NULL)
        s->heap[0] = s->heap[--s->nheap];
    heap_down(s, 0);
    return 0;
}

void sbl_sorter_free(sbl_sorter_t *s)
{
    if (s == NULL)
        return;
    for (size_t i = s->merging ? s->i : 0; i < s->n; i++)
        if (s->buf[i].doc != NULL)
            bson_destroy(s->buf[i].doc);
    for (size_t r = 0; r < s->nruns; r++)
        if (s->runs[r].head.doc != NULL)
            bson_destroy(s->runs[r].head.doc);
    if (s->fd >= 0)
        close(s->fd);
    free(s->buf);
    free(s->runs);
    free(s->heap);
    free(s);
}

int8_t sbl_spill_disk_use(const bson_t *cmd)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, cmd, "allowDiskUse") || !BSON_ITER_HOLDS_BOOL(&it))
        return 0;
    return bson_iter_bool(&it) ? 1 : -1;
}
