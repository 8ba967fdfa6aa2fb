/*
 * tool.h: what sable-dump, sable-restore, sable-export and sable-import share:
 * mongo-tools style command-line options, the connection (--uri or
 * --host/--port/-u/-p/--authenticationDatabase), namespace filters and renames
 * (--nsInclude/--nsExclude/--nsFrom/--nsTo), byte streams that may be gzip, a
 * progress line on stderr, and Extended JSON in and out.
 *
 * Conventions: functions return 0 on success and -1 on failure after printing
 * one line "<prog>: <what failed>" to stderr (tool_err); out-parameters are
 * cleared on entry; a caller owns what a *_new or *_open returns and frees it
 * with the matching *_free or *_close.
 */
#ifndef SABLE_TOOL_H
#define SABLE_TOOL_H

#include <bson/bson.h>
#include <mongoc/mongoc.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "doc/doc.h" /* sbl_append_value, sbl_append_iter */

/* The program name every message starts with (set by tool_opts_parse). */
extern const char *tool_prog;

/* Print "<prog>: <message>\n" to stderr; returns -1 so callers can `return tool_err(...)`. */
int tool_err(const char *fmt, ...) BSON_GNUC_PRINTF(1, 2);
/* The same, without the return value, for information (suppressed by --quiet). */
void tool_log(const char *fmt, ...) BSON_GNUC_PRINTF(1, 2);
extern bool tool_quiet;

/* ---- options ---------------------------------------------------------------------- */

typedef struct tool_strs {
    char **v;
    int n;
} tool_strs_t;

void tool_strs_push(tool_strs_t *s, const char *str);
void tool_strs_free(tool_strs_t *s);

typedef enum tool_opt_kind {
    TO_FLAG,   /* bool *: present or not (--x=false also accepted) */
    TO_STR,    /* const char **: --x V, --x=V, -x V */
    TO_INT,    /* long *: as TO_STR, then a decimal number */
    TO_OPTSTR, /* const char **: --x alone gives "-", --x=V gives V (mongodump's --archive) */
    TO_MULTI,  /* tool_strs_t *: repeatable */
} tool_opt_kind_t;

typedef struct tool_opt {
    const char *name; /* long name without "--" */
    char shortname;   /* 0: none */
    tool_opt_kind_t kind;
    void *dest;
    const char *help; /* NULL: accepted but not listed */
} tool_opt_t;

/* Connection options every tool takes; tool_conn_opts() lists them for the parser. */
typedef struct tool_conn {
    const char *uri, *host, *username, *password, *auth_db, *mechanism;
    long port;
    bool tls, tls_insecure;
    const char *tls_ca, *tls_cert;
    const char *write_concern; /* --writeConcern: "majority", a number, or a JSON document */
} tool_conn_t;

/*
 * Parse argv against opts (terminated by a {NULL} entry) and the connection
 * options.  Positional arguments go to positional (may be NULL: then any is an
 * error).  Returns 0, 1 when --help or --version was printed (exit 0), -1 on a
 * bad option (message printed).
 */
int tool_opts_parse(const char *prog, const char *usage, int argc, char **argv,
                    const tool_opt_t *opts, tool_conn_t *conn, tool_strs_t *positional);

/* ---- connection ------------------------------------------------------------------- */

/*
 * Connect and check the server answers a ping.  Returns a client the caller
 * frees with mongoc_client_destroy, or NULL after printing why (a bad
 * connection string, authentication, no server at the address).
 */
mongoc_client_t *tool_connect(const tool_conn_t *conn);

/* The write concern of --writeConcern (NULL: the server's default); caller frees. */
int tool_write_concern(const tool_conn_t *conn, mongoc_write_concern_t **wcp);

/* Run a command on db; on failure prints "<what>: <server message>" and returns -1. */
int tool_command(mongoc_client_t *c, const char *db, const bson_t *cmd, bson_t *reply,
                 const char *what);

/* The server's version string (buildInfo.version) into buf. */
void tool_server_version(mongoc_client_t *c, char *buf, size_t len);

/* ---- parallel inserts (tool_insert.c) ----------------------------------------------- */

typedef struct tool_insert_opts {
    int workers;        /* threads, each with its own connection (< 1: 1) */
    long batch_docs;    /* documents per insert command (< 1: 1000; at most 8 MB each) */
    bool ordered, bypass_validation, stop_on_error;
    const mongoc_write_concern_t *wc; /* NULL: the server's default; the caller's */
    int64_t max_reported;             /* per-document errors logged, then only counted */
    const char *error_prefix;         /* "<prefix>: <errmsg>" for a document's error */
    const char *stop_prefix;          /* "<prefix>: <errmsg>" when --stopOnError stops */
    const char *fatal_prefix;         /* "<prefix>: <message>" when the server fails a batch */
} tool_insert_opts_t;

typedef struct tool_inserter tool_inserter_t;
/* Start the workers for db.coll (connecting each as conn says).  NULL when no
   connection could be made (message printed). */
tool_inserter_t *tool_inserter_new(const tool_conn_t *conn, const char *db, const char *coll,
                                   const tool_insert_opts_t *o);
/* Queue a copy of doc (sent in batches).  -1 once a fatal error stopped the workers. */
int tool_inserter_add(tool_inserter_t *in, const bson_t *doc);
/* Send what is left, wait for the workers and free in: *okp documents inserted,
   *failedp refused one by one.  Returns -1 when a fatal error stopped them, else 0. */
int tool_inserter_finish(tool_inserter_t *in, int64_t *okp, int64_t *failedp);

/* ---- namespaces ------------------------------------------------------------------- */

/*
 * Namespace filters and renames as mongorestore has them: --nsInclude and
 * --nsExclude patterns where '*' matches any characters; --nsFrom/--nsTo pairs
 * where $name$ in nsFrom captures characters and $name$ in nsTo puts them back.
 */
typedef struct tool_ns {
    tool_strs_t include, exclude, from, to;
} tool_ns_t;

int tool_ns_check(const tool_ns_t *ns); /* nsFrom and nsTo pair up; variables match */
bool tool_ns_selected(const tool_ns_t *ns, const char *db, const char *coll);
/* The namespace db.coll is restored to, into out ("db.coll"); returns 0, or -1 if too long. */
int tool_ns_rename(const tool_ns_t *ns, const char *db, const char *coll, char *out,
                   size_t outlen);
/* '*' matches any run of characters (including none). */
bool tool_wildcard_match(const char *pattern, const char *s);
/* Split "db.coll" at the first '.'; db and coll are written into the buffers. */
void tool_ns_split(const char *ns, char *db, size_t dblen, char *coll, size_t colllen);

/* ---- byte streams ----------------------------------------------------------------- */

typedef struct tool_stream tool_stream_t;

/* Open path ("-": stdin/stdout) for reading or writing, gzip-compressed when gzip.
   Returns NULL after printing why. */
tool_stream_t *tool_stream_open(const char *path, bool write, bool gzip);
/* Read exactly n bytes: returns n, 0 at a clean end of input (nothing read), -1 on
   an I/O error, -2 when the input ends part-way (truncated). */
int64_t tool_stream_read(tool_stream_t *s, void *buf, size_t n);
/* Read up to n bytes: returns how many (0 at the end), -1 on an error. */
int64_t tool_stream_read_some(tool_stream_t *s, void *buf, size_t n);
/* Bytes read so far (after decompression). */
int64_t tool_stream_nread(const tool_stream_t *s);
/* A sliding window over a stream for text readers: buf[pos..len) is unread.
   tool_window_fill moves the unread bytes to the front, grows buf (keeping one
   byte past cap free for a terminator) and reads more: 1 when it read, 0 at
   the end (eof set), -1 on an error. */
typedef struct tool_window {
    char *buf;
    size_t len, pos, cap;
    bool eof;
} tool_window_t;
int tool_window_fill(tool_stream_t *in, tool_window_t *w);
int tool_stream_write(tool_stream_t *s, const void *buf, size_t n);
/* Flush and close; returns -1 if anything failed to reach the file. */
int tool_stream_close(tool_stream_t *s);
const char *tool_stream_path(const tool_stream_t *s);

/* Read a BSON document stream (.bson files, mongodump's layout): one document at a
   time.  Returns 1 with doc initialized static over the reader's buffer (valid until
   the next call), 0 at the end, -1 on an I/O error, a truncated or invalid document
   (message printed). */
typedef struct tool_bson_reader {
    tool_stream_t *in;
    uint8_t *buf;
    size_t cap;
    int64_t offset; /* bytes consumed so far */
} tool_bson_reader_t;
int tool_bson_next(tool_bson_reader_t *r, bson_t *doc);
void tool_bson_reader_free(tool_bson_reader_t *r);

/* ---- progress --------------------------------------------------------------------- */

typedef struct tool_progress {
    const char *what; /* e.g. "db.coll" */
    double start, last;
    int64_t docs, bytes;
    int64_t total_docs;  /* 0: unknown */
    int64_t total_bytes; /* 0: unknown; used for the share and time left without total_docs */
    double interval;     /* seconds between lines ($SABLE_TOOLS_PROGRESS_SECS, default 1) */
    const char *unit;    /* what docs counts: NULL for "documents" */
} tool_progress_t;

double tool_now(void);
void tool_progress_start(tool_progress_t *p, const char *what, int64_t total_docs);
/* Count docs and bytes; prints a line to stderr at most once a second (every
   $SABLE_TOOLS_PROGRESS_SECS seconds when set: tests use a short interval). */
void tool_progress_add(tool_progress_t *p, int64_t docs, int64_t bytes);
/* The closing line: documents, bytes, seconds, rates. */
void tool_progress_done(tool_progress_t *p, const char *verb);

/* ---- Extended JSON ---------------------------------------------------------------- */

/* doc as compact Extended JSON v2 (canonical or relaxed), malloc'd, NUL-terminated;
   *lenp its length.  Caller frees with bson_free. */
char *tool_to_json(const bson_t *doc, bool canonical, size_t *lenp);
/* Append doc (or the value at it) as compact Extended JSON v2 to out: the same bytes as
   tool_to_json. */
void tool_json_append(bson_string_t *out, const bson_t *doc, bool canonical);
void tool_json_append_value(bson_string_t *out, const bson_iter_t *it, bool canonical);
/* Remove whitespace outside strings, in place; returns the new length. */
size_t tool_json_compact(char *s, size_t len);

/* Reads JSON documents one by one from a stream: documents one after another (any
   whitespace between), or, when array, one JSON array of documents. */
typedef struct tool_json_reader {
    tool_stream_t *in;
    bool array;
    tool_window_t win;
    bool seen_open, seen_close;
    int64_t line; /* 1-based line of the document's start, for messages */
    int64_t offset;
} tool_json_reader_t;
/* Returns 1 with doc initialized (caller destroys), 0 at the end, -1 on bad input
   (message printed). */
int tool_json_next(tool_json_reader_t *r, bson_t *doc);
void tool_json_reader_free(tool_json_reader_t *r);

/* Parse a JSON (Extended JSON, shell forms as libbson accepts) command-line value. */
int tool_json_arg(const char *what, const char *json, bson_t *out);

#endif
