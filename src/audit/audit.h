/*
 * audit.h: the audit log (MongoDB Enterprise's event shape and options).
 *
 * Callers format an event on their own thread (sbl_audit_event) into one
 * shared append buffer under a short lock, with a sequence number; a network
 * loop's own events (sbl_audit_event_self, sbl_audit_command with self) go
 * into that thread's lane instead, numbered per thread.  Whoever must know
 * an event is written before going on (a network loop about to acknowledge
 * a change) calls sbl_audit_flush, which writes every buffered shared event
 * and then its own lane (group write); anything else is written by the
 * writer thread shortly after.  What must stay true:
 *  - shared events appear in the file in sequence order, and one
 *    connection's events in the order they were made (see "lanes" in
 *    audit.c);
 *  - sbl_audit_written(seq) is true only once write(2) of that event returned;
 *  - while the file cannot be written, sbl_audit_event refuses new events
 *    (the caller refuses the operation) and the writer keeps retrying.
 */
#ifndef SBL_AUDIT_H
#define SBL_AUDIT_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/errors.h"

typedef enum { SBL_AUDIT_OFF, SBL_AUDIT_FILE, SBL_AUDIT_SYSLOG, SBL_AUDIT_CONSOLE } sbl_audit_dest_t;
typedef enum { SBL_AUDIT_JSON, SBL_AUDIT_BSON } sbl_audit_format_t;

typedef struct sbl_audit_config {
    sbl_audit_dest_t destination;
    sbl_audit_format_t format;
    const char *path;     /* the file (destination file) */
    const bson_t *filter; /* query over the event document, or NULL */
    bool auth_success;    /* auditAuthorizationSuccess */
} sbl_audit_config_t;

/* Who an event is about (all fields may be NULL). */
typedef struct sbl_audit_client {
    const uint8_t *uuid;   /* 16 bytes: the connection's UUID */
    const char *local;     /* "ip:port" */
    const char *remote;    /* "ip:port" */
    const char *user;      /* authenticated user, or NULL */
    const char *user_db;
    const bson_t *roles;   /* BSON array of {role, db}, or NULL */
    /* The JSON of all the above as sbl_audit_who_json made it (a per-connection
     * cache), or NULL: the JSON format then formats the fields above. */
    const char *who_json;
    size_t who_json_len;
} sbl_audit_client_t;

/* The client's part of a JSON event (,"uuid":..,"roles":[..]) into out
 * (cap bytes): its length, or 0 when it does not fit. */
size_t sbl_audit_who_json(const sbl_audit_client_t *c, char *out, size_t cap);

/* Open the destination and start the writer thread.  A file that cannot be
 * opened is not fatal: it is logged and retried, and events are refused
 * meanwhile.  Errors: BadValue for a bad filter. */
int sbl_audit_open(const sbl_audit_config_t *cfg, sbl_err_t *err);
/* Write what is buffered, fsync, stop the writer and close the file. */
void sbl_audit_close(void);

/* Whether events are built as BSON documents (a filter or the BSON format):
 * then every field of sbl_audit_client_t is needed, not just who_json. */
bool sbl_audit_needs_bson(void);
/* Auditing is on (a destination is configured).  A plain load. */
bool sbl_audit_enabled(void);
/* Events recorded (passed the filter and went to the destination) since start. */
uint64_t sbl_audit_events_total(void);
/* auditAuthorizationSuccess, readable and settable at run time. */
bool sbl_audit_auth_success(void);
void sbl_audit_set_auth_success(bool on);

/* The state of the writer: 0 when the file is being written, else the
 * error (OutOfDiskSpace 14031 for ENOSPC, InternalError otherwise) with
 * "audit log write failed: ..." in err. */
int sbl_audit_health(sbl_err_t *err);

/*
 * Record one event.  param may be NULL (an empty document).  Returns 0 and
 * sets *seqp (0 when the event was not recorded: auditing off or the filter
 * excluded it), or the health error when the file cannot be written (the
 * event is not recorded; the caller refuses the operation).  force records
 * the event even then (it is written once the file works again).
 */
int sbl_audit_event(const char *atype, const sbl_audit_client_t *c, const bson_t *param,
                    int result, bool force, uint64_t *seqp, sbl_err_t *err);
/* The same with param.args = args appended after param's fields (not copied
 * into an intermediate document: authCheck's args is the whole command). */
int sbl_audit_event_args(const char *atype, const sbl_audit_client_t *c, const bson_t *param,
                         const bson_t *args, int result, bool force, uint64_t *seqp,
                         sbl_err_t *err);

/* The same for a caller that writes the event itself soon (a network loop's
 * sbl_audit_flush at the end of its iteration): the writer thread is not
 * woken for it (no futex wake and no writer wake-up per event). */
int sbl_audit_event_self(const char *atype, const sbl_audit_client_t *c, const bson_t *param,
                         const bson_t *args, int result, bool force, uint64_t *seqp,
                         sbl_err_t *err);

/*
 * An event whose param is {command, ns, args} (authCheck), written without
 * an intermediate param document.  args is the command: a top-level "pwd"
 * is recorded as "xxx", and a command larger than 64 KiB as
 * {"$truncated": <its size>}.  self: the caller writes the event itself
 * soon (as sbl_audit_event_self); otherwise as sbl_audit_event_args.
 */
int sbl_audit_command(const char *atype, const sbl_audit_client_t *c, const char *command,
                      const char *ns, const bson_t *args, int result, bool force, bool self,
                      uint64_t *seqp, sbl_err_t *err);

/* Whether doc has the top-level key: a scan of its bytes, cheaper than a
 * bson_iter_t (for the audit of every command: "pwd" is redacted). */
bool sbl_audit_doc_has_key(const bson_t *doc, const char *key);

/* Whether write(2) has returned for every event up to seq (an atomic load). */
bool sbl_audit_written(uint64_t seq);
/*
 * Write every buffered event now, on this thread, with one write(2) (unless
 * event seq is written already; another thread writing meanwhile may take
 * it).  Returns 0 once event seq is written, or the health error.  seq 0:
 * write what is buffered if no other thread is writing (never waits);
 * returns 0.
 */
int sbl_audit_flush(uint64_t seq, sbl_err_t *err);

/* Before a thread that makes events itself (a network loop: its events go
 * into its own lane, written by its own sbl_audit_flush) hands a
 * connection's work to another thread: the events it made so far are put
 * ahead of any that thread makes.  Cheap when there are none. */
void sbl_audit_seal(void);

/* Rename the file to <path>.<UTC timestamp> and open a new one, between two
 * batches (no event lost or duplicated).  Nothing to do when not a file. */
int sbl_audit_rotate(sbl_err_t *err);

/* The filter, replaceable at run time (compiled once with the matcher). */
int sbl_audit_set_filter(const bson_t *filter, sbl_err_t *err);
/* {filter, auditAuthorizationSuccess, destination, format, path} */
void sbl_audit_get_config(bson_t *out);

/* The journal flusher's hook: fdatasync the file when something was written
 * since the last sync.  Returns 0 or an errno. */
int sbl_audit_sync(void);

#endif
