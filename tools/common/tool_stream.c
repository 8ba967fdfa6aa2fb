/*
 * tool_stream.c: files and standard input/output, plain or gzip (zlib's gzip
 * format, what mongodump --gzip writes), read as BSON document streams; and
 * the progress line every long run prints to stderr.
 *
 * What must stay true: a write error or a failed close is reported (a backup
 * that did not reach the disk must not look like a success), and a truncated
 * input is told apart from a clean end.  A written stream's bytes reach the file
 * in the order they were given, through one writer thread per stream (so gzip
 * compression and file writes overlap the caller's work); its error is reported
 * by the next write or by the close.
 */
#include "tool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#define STREAM_BUF (1 << 20)
#define MAX_DOC (16 * 1024 * 1024 + 16 * 1024)
#define WBUF (4 << 20) /* a written stream's buffers: filled by the caller, written by a thread */
#define NWBUF 3

struct tool_stream {
    FILE *f;
    gzFile gz;
    bool write;
    char *path;
    int64_t nread; /* reading: bytes handed to the caller so far */
    /* Writing: the caller fills bufs[(head + queued) % NWBUF]; the writer thread writes
       (and compresses) the queued ones in order, so the file work overlaps the caller's
       reading from the server.  failed is set by the writer, with its message in werr. */
    pthread_t writer;
    bool started, stop, failed, reported;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *bufs[NWBUF];
    size_t lens[NWBUF];
    int head, queued; /* under mu: the oldest queued buffer, how many are queued */
    int cur;          /* the caller's: the buffer being filled ((head + queued) % NWBUF) */
    size_t fill;
    char werr[256];
};

/* Write len bytes to the file or the gzip stream: 0, or -1 with werr set. */
static int write_out(tool_stream_t *s, const char *buf, size_t len)
{
    if (s->gz != NULL) {
        if (gzwrite(s->gz, buf, (unsigned)len) != (int)len) {
            int en;
            snprintf(s->werr, sizeof(s->werr), "%s", gzerror(s->gz, &en));
            return -1;
        }
        return 0;
    }
    if (fwrite(buf, 1, len, s->f) != len) {
        snprintf(s->werr, sizeof(s->werr), "%s", strerror(errno));
        return -1;
    }
    return 0;
}

static void *writer_main(void *arg)
{
    tool_stream_t *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->queued == 0 && !s->stop)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->queued == 0)
            break;
        int i = s->head;
        bool skip = s->failed;
        pthread_mutex_unlock(&s->mu);
        int rc = skip ? 0 : write_out(s, s->bufs[i], s->lens[i]);
        pthread_mutex_lock(&s->mu);
        if (rc != 0)
            s->failed = true;
        s->head = (s->head + 1) % NWBUF;
        s->queued--;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Hand the buffer being filled to the writer; wait for a free one.  0, or -1 once the
   writer failed (message printed). */
static int submit(tool_stream_t *s)
{
    pthread_mutex_lock(&s->mu);
    s->lens[s->cur] = s->fill;
    s->queued++;
    s->cur = (s->cur + 1) % NWBUF;
    s->fill = 0;
    pthread_cond_broadcast(&s->cv);
    while (s->queued == NWBUF && !s->failed)
        pthread_cond_wait(&s->cv, &s->mu);
    bool failed = s->failed, tell = failed && !s->reported;
    s->reported = s->reported || failed;
    pthread_mutex_unlock(&s->mu);
    if (tell)
        tool_err("writing %s: %s", s->path, s->werr);
    return failed ? -1 : 0;
}

static void start_writer(tool_stream_t *s)
{
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    for (int i = 0; i < NWBUF; i++)
        s->bufs[i] = malloc(WBUF);
    s->started = pthread_create(&s->writer, NULL, writer_main, s) == 0;
}

/* Write what is buffered and stop the writer: 0, or -1 (message printed). */
static int stop_writer(tool_stream_t *s)
{
    int rc = 0;
    if (s->fill > 0)
        rc = submit(s);
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->writer, NULL);
    if (s->failed && !s->reported)
        tool_err("writing %s: %s", s->path, s->werr);
    if (s->failed)
        rc = -1;
    for (int i = 0; i < NWBUF; i++)
        free(s->bufs[i]);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    s->started = false;
    return rc;
}

tool_stream_t *tool_stream_open(const char *path, bool write, bool gzip)
{
    tool_stream_t *s = calloc(1, sizeof(*s));
    s->write = write;
    bool std = strcmp(path, "-") == 0;
    s->path = strdup(std ? (write ? "standard output" : "standard input") : path);
    if (gzip) {
        int fd = std ? dup(write ? 1 : 0) : -1;
        s->gz = std ? gzdopen(fd, write ? "wb" : "rb") : gzopen(path, write ? "wb" : "rb");
        if (s->gz == NULL) {
            tool_err("cannot open %s: %s", s->path, strerror(errno ? errno : EINVAL));
            free(s->path);
            free(s);
            return NULL;
        }
        gzbuffer(s->gz, STREAM_BUF);
        if (write)
            start_writer(s);
        return s;
    }
    s->f = std ? (write ? stdout : stdin) : fopen(path, write ? "wb" : "rb");
    if (s->f == NULL) {
        tool_err("cannot open %s: %s", s->path, strerror(errno));
        free(s->path);
        free(s);
        return NULL;
    }
    setvbuf(s->f, NULL, _IOFBF, STREAM_BUF);
    if (write)
        start_writer(s);
    return s;
}

const char *tool_stream_path(const tool_stream_t *s)
{
    return s->path;
}

int64_t tool_stream_read_some(tool_stream_t *s, void *buf, size_t n)
{
    if (s->gz != NULL) {
        int r = gzread(s->gz, buf, (unsigned)n);
        if (r < 0) {
            int en;
            const char *m = gzerror(s->gz, &en);
            tool_err("reading %s: %s", s->path, m);
            return -1;
        }
        s->nread += r;
        return r;
    }
    size_t r = fread(buf, 1, n, s->f);
    if (r < n && ferror(s->f)) {
        tool_err("reading %s: %s", s->path, strerror(errno));
        return -1;
    }
    s->nread += (int64_t)r;
    return (int64_t)r;
}

int64_t tool_stream_nread(const tool_stream_t *s)
{
    return s->nread;
}

int64_t tool_stream_read(tool_stream_t *s, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        int64_t r = tool_stream_read_some(s, (char *)buf + got, n - got);
        if (r < 0)
            return -1;
        if (r == 0)
            return got == 0 ? 0 : -2;
        got += (size_t)r;
    }
    return (int64_t)n;
}

int tool_stream_write(tool_stream_t *s, const void *buf, size_t n)
{
    if (n == 0)
        return 0;
    if (!s->started) /* no thread could be started: write in place */
        return write_out(s, buf, n) == 0 ? 0 : tool_err("writing %s: %s", s->path, s->werr);
    const char *p = buf;
    while (n > 0) {
        size_t k = WBUF - s->fill < n ? WBUF - s->fill : n;
        memcpy(s->bufs[s->cur] + s->fill, p, k);
        s->fill += k;
        p += k;
        n -= k;
        if (s->fill == WBUF && submit(s) != 0)
            return -1;
    }
    return 0;
}

int tool_stream_close(tool_stream_t *s)
{
    int rc = 0;
    if (s == NULL)
        return 0;
    if (s->started && stop_writer(s) != 0)
        rc = -1;
    if (s->gz != NULL) {
        int r = gzclose(s->gz);
        if (r != Z_OK && (s->write || r != Z_BUF_ERROR))
            rc = tool_err("closing %s: zlib error %d", s->path, r);
    } else if (s->f == stdout) {
        if (fflush(s->f) != 0)
            rc = tool_err("writing %s: %s", s->path, strerror(errno));
    } else if (s->f != stdin) {
        if (fclose(s->f) != 0 && s->write)
            rc = tool_err("closing %s: %s", s->path, strerror(errno));
    }
    free(s->path);
    free(s);
    return rc;
}

/* ---- BSON document streams -------------------------------------------------------- */

int tool_bson_next(tool_bson_reader_t *r, bson_t *doc)
{
    uint8_t lenb[4];
    int64_t n = tool_stream_read(r->in, lenb, 4);
    if (n == 0)
        return 0;
    if (n < 0)
        return n == -2 ? tool_err("%s: truncated at byte %lld (a document's length is cut "
                                  "short)",
                                  tool_stream_path(r->in), (long long)r->offset)
                       : -1;
    uint32_t len = (uint32_t)lenb[0] | (uint32_t)lenb[1] << 8 | (uint32_t)lenb[2] << 16 |
                   (uint32_t)lenb[3] << 24;
    if (len < 5 || len > MAX_DOC)
        return tool_err("%s: invalid BSON at byte %lld (document length %u)",
                        tool_stream_path(r->in), (long long)r->offset, len);
    if (r->cap < len) {
        r->cap = len < 65536 ? 65536 : len;
        r->buf = realloc(r->buf, r->cap);
    }
    memcpy(r->buf, lenb, 4);
    n = tool_stream_read(r->in, r->buf + 4, len - 4);
    if (n != (int64_t)(len - 4))
        return n == -1 ? -1
                       : tool_err("%s: truncated at byte %lld (a %u-byte document is cut short)",
                                  tool_stream_path(r->in), (long long)r->offset, len);
    if (!bson_init_static(doc, r->buf, len))
        return tool_err("%s: invalid BSON document at byte %lld", tool_stream_path(r->in),
                        (long long)r->offset);
    r->offset += len;
    return 1;
}

void tool_bson_reader_free(tool_bson_reader_t *r)
{
    free(r->buf);
    r->buf = NULL;
    r->cap = 0;
}

/* ---- progress --------------------------------------------------------------------- */

double tool_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void tool_progress_start(tool_progress_t *p, const char *what, int64_t total_docs)
{
    memset(p, 0, sizeof(*p));
    p->what = what;
    p->start = p->last = tool_now();
    p->total_docs = total_docs;
    const char *env = getenv("SABLE_TOOLS_PROGRESS_SECS");
    p->interval = env != NULL && atof(env) > 0 ? atof(env) : 1.0;
}

static void progress_line(tool_progress_t *p, double now, const char *verb)
{
    double secs = now - p->start;
    double mb = p->bytes / 1e6;
    double rate_mb = secs > 0 ? mb / secs : 0, rate_docs = secs > 0 ? p->docs / secs : 0;
    if (verb == NULL && p->total_docs <= 0 && p->total_bytes > 0) {
        double left = rate_mb > 0 ? (p->total_bytes / 1e6 - mb) / rate_mb : 0;
        const char *unit = p->unit != NULL ? p->unit : "documents";
        fprintf(stderr,
                "%s: [%s] %.1f/%.1f MB (%.1f%%)  %lld %s  %.1f MB/s  %.0f %s/s  %.0fs left\n",
                tool_prog, p->what, mb, p->total_bytes / 1e6, 100.0 * p->bytes / p->total_bytes,
                (long long)p->docs, unit, rate_mb, rate_docs,
                p->unit != NULL ? p->unit : "docs", left < 0 ? 0 : left);
    } else if (verb == NULL && p->total_docs > 0) {
        double left = rate_docs > 0 ? (p->total_docs - p->docs) / rate_docs : 0;
        fprintf(stderr,
                "%s: [%s] %lld/%lld documents (%.1f%%)  %.1f MB  %.1f MB/s  %.0f docs/s  "
                "%.0fs left\n",
                tool_prog, p->what, (long long)p->docs, (long long)p->total_docs,
                100.0 * p->docs / p->total_docs, mb, rate_mb, rate_docs, left < 0 ? 0 : left);
    } else {
        fprintf(stderr, "%s: %s%s%s %lld documents  %.1f MB  in %.2fs  %.1f MB/s  %.0f docs/s\n",
                tool_prog, verb ? verb : "[", p->what, verb ? ":" : "]", (long long)p->docs, mb,
                secs, rate_mb, rate_docs);
    }
}

void tool_progress_add(tool_progress_t *p, int64_t docs, int64_t bytes)
{
    p->docs += docs;
    p->bytes += bytes;
    if ((p->docs & 1023) != 0 && docs == 1 && p->interval >= 1.0)
        return; /* look at the clock once every 1024 documents */
    double now = tool_now();
    if (now - p->last >= p->interval) {
        p->last = now;
        if (!tool_quiet)
            progress_line(p, now, NULL);
    }
}

void tool_progress_done(tool_progress_t *p, const char *verb)
{
    if (!tool_quiet)
        progress_line(p, tool_now(), verb);
}

int tool_window_fill(tool_stream_t *in, tool_window_t *w)
{
    if (w->eof)
        return 0;
    if (w->pos > 0) {
        memmove(w->buf, w->buf + w->pos, w->len - w->pos);
        w->len -= w->pos;
        w->pos = 0;
    }
    if (w->cap - w->len < 65536) {
        w->cap = w->cap ? w->cap * 2 : 1 << 20;
        w->buf = realloc(w->buf, w->cap + 1);
    }
    int64_t n = tool_stream_read_some(in, w->buf + w->len, w->cap - w->len);
    if (n < 0)
        return -1;
    if (n == 0)
        w->eof = true;
    w->len += (size_t)n;
    return n > 0;
}
