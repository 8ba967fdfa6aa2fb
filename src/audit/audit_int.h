/*
 * audit_int.h: what the audit log's files share: audit.c (the log's state,
 * making an event, configuration), audit_event.c (an event's BSON and JSON
 * forms), audit_write.c (writing, the writer thread, rotation) and
 * audit_json.c (BSON to JSON).  Private to src/audit/.
 *
 * What must stay true: the formatter writes relaxed extended JSON (the same
 * documents libbson's bson_as_relaxed_extended_json would give, one per
 * line) straight into an audit_buf_t; on allocation failure it sets oom and
 * the caller drops what was appended (len is restored).
 */
#ifndef SBL_AUDIT_INT_H
#define SBL_AUDIT_INT_H

#include <bson/bson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <sys/types.h>

#include "audit/audit.h"
#include "query/query.h"

typedef struct audit_buf {
    char *data;
    size_t len, cap;
    bool oom;      /* an append failed since the flag was last cleared */
    bool borrowed; /* data is the caller's array (not to be freed): growing
                    * moves the bytes to a heap block the buffer then owns */
} audit_buf_t;

/* The slow half of audit_buf_reserve: grow the buffer. */
bool audit_buf_grow(audit_buf_t *b, size_t n);
/* Make room for n more bytes; false (and oom set) when memory is short.
 * Inline: the formatter reserves once per element, and a call per
 * reservation was a good part of an event's cost. */
static inline bool audit_buf_reserve(audit_buf_t *b, size_t n)
{
    return b->cap - b->len >= n || audit_buf_grow(b, n);
}
static inline void audit_buf_put(audit_buf_t *b, const void *data, size_t n)
{
    if (n != 0 && audit_buf_reserve(b, n)) {
        memcpy(b->data + b->len, data, n);
        b->len += n;
    }
}
static inline void audit_buf_puts(audit_buf_t *b, const char *s)
{
    audit_buf_put(b, s, strlen(s));
}

/* s (n bytes) as a quoted, escaped JSON string. */
void audit_json_str(audit_buf_t *b, const char *s, size_t n);
/* An integer in decimal. */
void audit_json_int(audit_buf_t *b, int64_t v);
/* A document (or array) as relaxed extended JSON. */
void audit_json_doc(audit_buf_t *b, const bson_t *doc, bool array);
/* A command as param.args: the same, except that a top-level "pwd" is
 * written as "xxx" (the password of createUser/updateUser); its lsid's JSON
 * is remembered per thread (the same bytes give the same JSON). */
void audit_json_args(audit_buf_t *b, const bson_t *cmd);
/* The fields of doc without the braces ("a": 1, "b": 2), for splicing. */
void audit_json_fields(audit_buf_t *b, const bson_t *doc);
/* {"$date": "yyyy-mm-ddTHH:MM:SS.mmmZ"} for ms since the epoch. */
void audit_json_date(audit_buf_t *b, int64_t ms);
/* For tests: lower base64's code path to at most level (0 scalar, 1 SSSE3,
 * 2 AVX2; never above what the CPU runs); returns the level now in use. */
int audit_json_simd(int level);

/* ---- the log's state and the helpers its files share ---------------------- */

/* The fields sit in groups a cache line apart by who writes them: the
 * settings every audit call site reads (written only when the configuration
 * changes) must not share a line with the mutex and counters the two loop
 * threads write for every event, or each read of "on" pulls that line over
 * from the other core. */
#define AUDIT_LINE 64
/* Threads with a lane of their own (network loops); others use the shared buffer. */
#define MAX_LANES 64
/* Set in the number of an event in its thread's lane (see "lanes" in audit.c). */
#define LANE_BIT (UINT64_C(1) << 63)

typedef struct audit_state {
    /* Read on every call; written only by configuration changes. */
    _Alignas(AUDIT_LINE) atomic_bool on;
    atomic_bool auth_success;
    atomic_bool needs_bson; /* a filter or the BSON format: read without the lock */
    atomic_int health_errno; /* 0: writing works */
    atomic_uint_fast64_t filter_gen; /* bumped when the filter changes (the decisions' memos) */
    sbl_audit_dest_t dest;
    sbl_audit_format_t fmt;
    char *path;

    /* Written for every event. */
    _Alignas(AUDIT_LINE) pthread_mutex_t mu; /* guards buf, next_seq and the writer's flags */
    audit_buf_t buf;        /* formatted events not yet taken by a writer */
    uint64_t next_seq;      /* last sequence number handed out */
    bool writer_idle, kick, stop, rotate_req;
    atomic_uint_fast64_t last_seq; /* next_seq, readable without mu */

    /* Written for every group write. */
    _Alignas(AUDIT_LINE) atomic_uint_fast64_t written_seq;
    atomic_llong last_write_ms; /* monotonic time of the last write */
    atomic_bool dirty;          /* written since the last fdatasync */
    pthread_mutex_t wmu; /* one writer at a time: guards wb, wb_off, wb_last */
    audit_buf_t wb;      /* taken from buf, not yet fully written */
    size_t wb_off;
    uint64_t wb_last;

    /* Seldom written. */
    _Alignas(AUDIT_LINE) pthread_cond_t cv; /* the writer waits here for work */
    pthread_cond_t done_cv; /* rotate callers wait here */
    uint64_t rotate_gen;
    int rotate_rc;
    char rotate_msg[256];

    pthread_rwlock_t filter_lock;
    sbl_matcher_t *filter;
    bson_t *filter_doc;
    unsigned filter_mask; /* the event fields the filter can look at (EV_*) */

    pthread_t thread;
    bool running;
    uint64_t open_gen;              /* bumped by open and close: a thread's lane from before is gone */
    struct lane *lanes[MAX_LANES];  /* every thread's lane, under mu (freed at close) */
    int nlanes;
    pthread_mutex_t fd_mu; /* fd changes only under it (and wmu); sync reads it */
    int fd;
    off_t dropped_to;  /* the file's pages before this left the page cache (sync) */
} audit_state_t;

/* The audit log (audit.c). */
extern audit_state_t audit_g;

/* A thread's lane (see "lanes" in audit.c). */
typedef struct lane {
    audit_buf_t buf;     /* events not yet written (nor moved) */
    uint64_t seq;        /* the number of the thread's last event */
    uint64_t written;    /* events up to this one are written */
    uint64_t moved_upto; /* events up to this one went to the shared buffer ... */
    uint64_t moved_gseq; /* ... where they are written once this one is */
} lane_t;

/* The fields of an event, for the filter's mask (only what it can look at is built). */
enum {
    EV_ATYPE = 1 << 0,
    EV_TS = 1 << 1,
    EV_UUID = 1 << 2,
    EV_LOCAL = 1 << 3,
    EV_REMOTE = 1 << 4,
    EV_USERS = 1 << 5,
    EV_ROLES = 1 << 6,
    EV_PARAM = 1 << 7,
    EV_ARGS = 1 << 8, /* param.args */
    EV_RESULT = 1 << 9,
    EV_ALL = (1 << 10) - 1,
};

/* BSON bytes written by hand (libbson's appends cost a few hundred
 * instructions each): a stack buffer, moved to the heap when it fills. */
typedef struct ev_buf {
    uint8_t *p;
    size_t len, cap;
    bool heap, oom;
    uint8_t stack[1024];
} ev_buf_t;

/* An event's param: doc's fields, then {command, ns} when command is set,
 * then args.  cmd_args: args is a command (sbl_audit_command): a top-level
 * "pwd" is recorded as "xxx", and one larger than AUDIT_ARGS_MAX as
 * {"$truncated": <size>}. */
typedef struct ev_param {
    const bson_t *doc;
    const char *command, *ns;
    const bson_t *args;
    bool cmd_args;
} ev_param_t;

/* audit.c */
/* The error for a failing log (errno e): OutOfDiskSpace or InternalError. */
int audit_health_err(int e, sbl_err_t *err);
/* This thread's lane if it has one from the current open, else NULL. */
lane_t *audit_lane_cur(void);
/* Under mu: move what the lane holds to the end of the shared buffer, as
 * one more shared event. */
void audit_lane_move_locked(lane_t *l);
/* Whether every shared event handed out so far is written. */
bool audit_shared_all_written(void);

/* audit_event.c */
/* The event as a BSON document into b: only the fields in mask (EV_*). */
void audit_build_event(ev_buf_t *b, unsigned mask, const char *atype, int64_t ts,
                       const sbl_audit_client_t *c, const ev_param_t *pm, int result);
/* One JSON event line appended to b. */
void audit_json_event(audit_buf_t *b, const char *atype, int64_t ts,
                      const sbl_audit_client_t *c, const ev_param_t *pm, int result);

/* audit_write.c */
/* Open the log file for appending: the fd, or -1 with errno. */
int audit_open_file(void);
/* Under wmu: write the shared buffer's events, then the lane's; 0 or an errno. */
int audit_lane_flush_locked(lane_t *l);
/* The writer thread: writes what the loops leave, retries, rotates. */
void *audit_writer_main(void *arg);

#endif
