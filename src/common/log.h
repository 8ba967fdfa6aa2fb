/*
 * log.h: the server log, one JSON object per line in MongoDB's logv2 shape:
 *   {"t":{"$date":...},"s":"I","c":"NETWORK","id":22943,"ctx":"conn3","msg":"...","attr":{...}}
 *
 * Thread-safe: each line is formatted privately and written with one
 * write(2) on an O_APPEND descriptor, so lines never interleave.
 * ctx is per thread (sbl_log_set_ctx).
 */
#ifndef SBL_LOG_H
#define SBL_LOG_H

#include <bson/bson.h>
#include <stdbool.h>

/* Severity letters as logv2 prints them. */
#define SBL_LOG_FATAL 'F'
#define SBL_LOG_ERROR 'E'
#define SBL_LOG_WARNING 'W'
#define SBL_LOG_INFO 'I'
#define SBL_LOG_DEBUG 'D'

/* Direct the log to path (append) or, when path is NULL, to stdout. Returns 0 or errno. */
int sbl_log_open(const char *path);
/* Reopen the log file (log rotation); no-op for stdout. Returns 0 or errno. */
int sbl_log_reopen(void);
void sbl_log_close(void);
/* Silence debug lines unless verbosity >= 1 (default 0). */
void sbl_log_set_verbosity(int v);
int sbl_log_verbosity(void);

/* Name this thread in the "ctx" field ("conn12", "listener"); copies name. */
void sbl_log_set_ctx(const char *name);
/* A long-lived thread's name, set once at its start: the log's ctx and the
 * OS thread name (its first 15 bytes), which top -H, perf and
 * /proc/<pid>/task/<tid>/comm show.  Not for per-connection contexts
 * (it is a system call). */
void sbl_thread_name(const char *name);

/*
 * Write one line.  component is MongoDB's component name ("NETWORK",
 * "STORAGE", "COMMAND", "CONTROL", "QUERY", "WRITE", "ACCESS", "-"); attr may
 * be NULL.  Does not take ownership of attr.
 */
void sbl_log(char severity, const char *component, int id, const char *msg, const bson_t *attr);

/* The most recent log lines (for getLog), newest last; caller frees with bson_free each and array. */
char **sbl_log_recent(size_t *countp);

#endif
