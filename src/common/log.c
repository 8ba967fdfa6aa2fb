/*
 * log.c: logv2-shaped JSON lines (see log.h).  A ring of the most recent
 * lines is kept for the getLog command.
 */
#include "common/log.h"
#include "common/buf.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define SBL_LOG_RING 1024

static int log_fd = STDOUT_FILENO;
static char *log_path;
static int log_verbosity;
static _Thread_local char log_ctx[32] = "main";

static pthread_mutex_t ring_mu = PTHREAD_MUTEX_INITIALIZER;
static char *ring[SBL_LOG_RING];
static size_t ring_next;

int sbl_log_open(const char *path)
{
    if (path == NULL)
        return 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return errno;
    bson_free(log_path);
    log_path = bson_strdup(path);
    if (log_fd != STDOUT_FILENO)
        close(log_fd);
    log_fd = fd;
    return 0;
}

int sbl_log_reopen(void)
{
    if (log_path == NULL)
        return 0;
    int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return errno;
    int old = log_fd;
    log_fd = fd;
    if (old != STDOUT_FILENO)
        close(old);
    return 0;
}

void sbl_log_close(void)
{
    if (log_fd != STDOUT_FILENO)
        close(log_fd);
    log_fd = STDOUT_FILENO;
    bson_free(log_path);
    log_path = NULL;
    pthread_mutex_lock(&ring_mu);
    for (size_t i = 0; i < SBL_LOG_RING; i++) {
        bson_free(ring[i]);
        ring[i] = NULL;
    }
    pthread_mutex_unlock(&ring_mu);
}

void sbl_log_set_verbosity(int v)
{
    log_verbosity = v;
}

int sbl_log_verbosity(void)
{
    return log_verbosity;
}

void sbl_log_set_ctx(const char *name)
{
    sbl_strcpy_n(log_ctx, sizeof(log_ctx), name);
}

void sbl_thread_name(const char *name)
{
    char os[16];
    sbl_log_set_ctx(name);
    sbl_strcpy_n(os, sizeof(os), name);
    pthread_setname_np(pthread_self(), os);
}

static void json_escape(bson_string_t *s, const char *text)
{
    char *esc = bson_utf8_escape_for_json(text, -1);
    bson_string_append(s, esc ? esc : "");
    bson_free(esc);
}

void sbl_log(char severity, const char *component, int id, const char *msg, const bson_t *attr)
{
    if (severity == SBL_LOG_DEBUG && log_verbosity < 1)
        return;

    struct timeval tv;
    struct tm tm;
    char ts[64];
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    size_t n = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + n, sizeof(ts) - n, ".%03d+00:00", (int)(tv.tv_usec / 1000));

    bson_string_t *s = bson_string_new("{\"t\":{\"$date\":\"");
    bson_string_append(s, ts);
    bson_string_append_printf(s, "\"},\"s\":\"%c\",\"c\":\"%-8s\",\"id\":%d,\"ctx\":\"", severity,
                              component, id);
    json_escape(s, log_ctx);
    bson_string_append(s, "\",\"msg\":\"");
    json_escape(s, msg);
    bson_string_append(s, "\"");
    if (attr != NULL && !bson_empty(attr)) {
        size_t jlen;
        char *j = bson_as_relaxed_extended_json(attr, &jlen);
        if (j != NULL) {
            bson_string_append(s, ",\"attr\":");
            bson_string_append(s, j);
            bson_free(j);
        }
    }
    bson_string_append(s, "}\n");

    ssize_t off = 0;
    while (off < (ssize_t)s->len) {
        ssize_t w = write(log_fd, s->str + off, s->len - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        off += w;
    }

    s->str[s->len - 1] = '\0'; /* the ring keeps lines without the newline */
    char *line = bson_string_free(s, false);
    pthread_mutex_lock(&ring_mu);
    bson_free(ring[ring_next]);
    ring[ring_next] = line;
    ring_next = (ring_next + 1) % SBL_LOG_RING;
    pthread_mutex_unlock(&ring_mu);
}

char **sbl_log_recent(size_t *countp)
{
    char **out = bson_malloc0(sizeof(char *) * SBL_LOG_RING);
    size_t n = 0;
    pthread_mutex_lock(&ring_mu);
    for (size_t i = 0; i < SBL_LOG_RING; i++) {
        size_t k = (ring_next + i) % SBL_LOG_RING;
        if (ring[k] != NULL)
            out[n++] = bson_strdup(ring[k]);
    }
    pthread_mutex_unlock(&ring_mu);
    *countp = n;
    return out;
}
