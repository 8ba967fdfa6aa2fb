/*
 * cmd_int.h: private to src/cmd.  The command context every handler gets,
 * the handler signature, the shared helpers (namespaces, write concern,
 * cursors) and the declarations of the handlers that table.c lists.
 *
 * The rules of a handler: it reads ctx->cmd, does its work, appends its
 * result fields to ctx->reply and returns 0; or it returns an error code
 * with err filled in and leaves the reply alone: only the dispatcher writes
 * ok, errmsg, code and codeName.  A write command that reports per-document
 * failures (writeErrors) still returns 0.
 */
#ifndef SBL_CMD_INT_H
#define SBL_CMD_INT_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cmd/cmd.h"
#include "common/errors.h"
#include "metrics/metrics.h"
#include "storage/storage.h"

/* Per-connection state kept by the command layer. */
typedef struct sbl_client {
    uint64_t conn_id;
    int compressors[4]; /* negotiated compressor ids, in client preference order */
    int ncompressors;
    bson_t *metadata; /* client metadata from the first hello, or NULL */
    const char *app_name; /* metadata's application.name (points into it), or NULL */
    bool hello_seen;
    struct hello_wait *hello_wait; /* an awaitable hello in progress (handshake.c), or NULL */
    /* authentication (auth_cmds.c) */
    char *auth_user;         /* the authenticated user, or NULL */
    char *auth_db;           /* its database */
    struct sbl_authz *authz; /* its resolved privileges */
    uint64_t authz_gen;      /* the users/roles generation authz was resolved at */
    struct sbl_scram *scram; /* a SCRAM conversation in progress, or NULL */
    bool scram_skip_empty;   /* that conversation asked for skipEmptyExchange */
    int auth_failures;       /* failed attempts on this connection (each reply is delayed) */
    uint8_t audit_uuid[16];  /* the connection's UUID in audit events (audit_cmds.c) */
    bool audit_uuid_set;
    /* audit_cmds.c: this connection's part of a JSON audit event (uuid, local,
     * remote, users, roles), made for user/db at authz generation audit_who_gen */
    uint16_t audit_who_len; /* 0: not made */
    uint64_t audit_who_gen;
    char audit_who_key[128]; /* "user\ndb", or "" */
    char audit_who[512];
} sbl_client_t;

/* Parsed writeConcern. */
typedef struct sbl_write_concern {
    int w;      /* 0, 1, ... ; "majority" counts as 1 on a single node */
    bool j;     /* wait for the journal */
    bool given; /* the command carried a writeConcern */
} sbl_write_concern_t;

typedef struct sbl_cmd_ctx {
    sbl_conn_t *conn;       /* NULL when run internally */
    sbl_client_t *client;   /* never NULL (a dummy for internal runs) */
    sbl_request_t *req;     /* NULL when run internally */
    const bson_t *cmd;      /* the command document */
    const char *name;       /* the command's name as the table spells it */
    const char *db;         /* the target database ($db) */
    sbl_session_t *ss;      /* this thread's storage session */
    bson_t *reply;          /* handlers append their fields here */
    sbl_write_concern_t wc; /* parsed by the dispatcher for write commands */
    bool wrote;             /* set by a handler that committed a change (j:true then waits) */
    bool deferred;          /* the handler took over conn/req and will reply itself */
    int64_t start_us;       /* monotonic start time (maxTimeMS) */
    int64_t deadline_us;    /* 0: none; else monotonic deadline from maxTimeMS */
    sbl_op_t *op;           /* the registry entry (killOp sets its flag), or NULL */
    const char *plan_summary;             /* set by the query executor: "COLLSCAN", "IDHACK" ... */
    int64_t docs_examined, keys_examined; /* added to by the query executor */
    bool cursor_reply;  /* the cursor layer answered: the two fields below are set */
    int64_t nreturned;  /* documents in that batch */
    int64_t cursor_id;  /* the cursor id it returned (0: exhausted) */
    uint64_t audit_seq; /* the last audit event of this command (the reply waits for it) */
    sbl_write_counts_t writes; /* set by insert, update and delete with their reply */
} sbl_cmd_ctx_t;

typedef int (*sbl_cmd_fn)(sbl_cmd_ctx_t *ctx, sbl_err_t *err);

/* Command flags */
#define SBL_CMD_WRITE 0x01     /* changes data: write concern applies */
#define SBL_CMD_READ 0x02      /* reads user data */
#define SBL_CMD_NO_AUTH 0x04   /* allowed before authentication (hello, saslStart ...) */
#define SBL_CMD_ADMIN_ONLY 0x08 /* must be run against the admin database */
#define SBL_CMD_SLOW 0x10      /* may run long: executed on a worker thread, not a network loop */

typedef struct sbl_cmd_def {
    const char *name;
    sbl_cmd_fn fn;
    unsigned flags;
    const char *help;
    /* The MongoDB action the command needs when authorization is on ("find",
     * "insert", "serverStatus" ...; see src/auth/auth_priv.c), checked on the
     * command's collection, database or the cluster; "" means being
     * authenticated is enough; NULL (a row that names none) means root only.
     * Ignored for SBL_CMD_NO_AUTH rows. */
    const char *action;
} sbl_cmd_def_t;

/* The command table (table.c), sorted by name for binary search; lookup is
 * case-sensitive except for the legacy lowercase aliases listed in it. */
const sbl_cmd_def_t *sbl_cmd_lookup(const char *name);
const sbl_cmd_def_t *sbl_cmd_table(size_t *countp);

/* ---- helpers (util.c) ------------------------------------------------- */

/* Monotonic microseconds. */
int64_t sbl_now_us(void);
/* Wall-clock milliseconds since the epoch. */
int64_t sbl_now_ms(void);

/* Build "db.coll" from ctx->db and the string value of the command's first
 * field; validate both as MongoDB does (InvalidNamespace 73). */
int sbl_cmd_ns(const sbl_cmd_ctx_t *ctx, char *ns, size_t nslen, sbl_err_t *err);
/* Validate a database name / full namespace (InvalidNamespace 73). */
int sbl_validate_db_name(const char *db, sbl_err_t *err);
int sbl_validate_ns(const char *ns, sbl_err_t *err);
/* Users may create and write only the system collections MongoDB lets them
 * (system.js, system.views, system.profile, ...): InvalidNamespace (73) otherwise;
 * a view is never written: CommandNotSupportedOnView (166). */
int sbl_validate_user_write_ns(const char *ns, sbl_err_t *err);

/* Read an integer-valued field of any numeric type; TypeMismatch (14) when not numeric. */
int sbl_get_int64(const bson_iter_t *it, int64_t *out, sbl_err_t *err);

/* ExceededTimeLimit check for long loops: MaxTimeMSExpired (50) past the deadline. */
int sbl_cmd_check_deadline(const sbl_cmd_ctx_t *ctx, sbl_err_t *err);

/* The check long loops make: Interrupted (11601) once killOp asked this
 * operation to stop, MaxTimeMSExpired (50) past the deadline, else 0. */
static inline int sbl_cmd_check_interrupt(const sbl_cmd_ctx_t *ctx, sbl_err_t *err)
{
    if (sbl_op_is_killed(ctx->op))
        return sbl_err_set(err, SBL_E_Interrupted, "operation was interrupted");
    return sbl_cmd_check_deadline(ctx, err);
}

/* ---- cursors (cursor.c) ------------------------------------------------ */

/*
 * A server-side cursor produces documents one at a time.  The source keeps
 * whatever state it needs to resume in a later getMore (e.g. the last _id
 * returned), never a storage cursor across commands.
 */
typedef struct sbl_cursor_source {
    /* Produce the next document into *doc (initialised by next, owned by the caller); set
     * *donep at the end.  Returns 0 or an error code. */
    int (*next)(void *state, sbl_cmd_ctx_t *ctx, bson_t *doc, bool *donep, sbl_err_t *err);
    void (*free)(void *state);
    /* Optional (may be NULL): for a tailable cursor, true when the source's end is final
     * (its limit was reached), so the cursor closes instead of waiting for more. */
    bool (*finished)(void *state);
} sbl_cursor_source_t;

/*
 * Fill one batch from the source (at most batch_size documents, or up to
 * 16 MiB of documents; batch_size < 0 means 101 for a first batch and
 * unlimited for getMore), and append the standard reply
 *   cursor: {firstBatch|nextBatch: [...], id, ns}
 * to ctx->reply.  When the source is not exhausted (and single_batch is false)
 * the cursor is registered and its id returned in the reply; otherwise the
 * state is freed.  Takes ownership of state in every case.
 */
int sbl_cursor_first_batch(sbl_cmd_ctx_t *ctx, const char *ns, const sbl_cursor_source_t *src,
                           void *state, int64_t batch_size, bool single_batch, sbl_err_t *err);

/* The reply of a query that yields at most one document (doc, or NULL for
 * none) and so needs no cursor: cursor: {firstBatch: [doc], id: 0, ns}. */
void sbl_cursor_reply_one(sbl_cmd_ctx_t *ctx, const char *ns, const bson_t *doc);

/* Cursor flags (sbl_cursor_first_batch_flags). */
#define SBL_CURSOR_TAILABLE 0x1   /* stays open when its source runs dry (capped collections) */
#define SBL_CURSOR_AWAIT_DATA 0x2 /* an empty getMore waits up to its maxTimeMS (default 1 s) */
/* sbl_cursor_first_batch with flags: a tailable cursor is registered even when
 * its source is exhausted, and its source is asked again on each getMore. */
int sbl_cursor_first_batch_flags(sbl_cmd_ctx_t *ctx, const char *ns,
                                 const sbl_cursor_source_t *src, void *state, int64_t batch_size,
                                 bool single_batch, unsigned flags, sbl_err_t *err);

/* A source over an owned array of documents (listCollections, listIndexes, sorted results). */
void *sbl_cursor_docs_state(bson_t **docs, size_t n); /* takes ownership of docs and each doc */
extern const sbl_cursor_source_t sbl_cursor_docs_source;

/* Kill cursors idle for more than idle_ms (the reaper calls this; cursors are
 * not tied to connections: drivers may getMore from any pooled connection).
 * idle_ms < 0 kills every cursor (shutdown). */
void sbl_cursors_reap(int64_t idle_ms);
int64_t sbl_cursors_open_count(void);

/* ---- handlers ----------------------------------------------------------- */

/* crud.c, crud_write.c, crud_read.c, agg.c */
int sbl_cmd_insert(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_update(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_delete(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_find_and_modify(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_find(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_get_more(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_kill_cursors(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_count(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_distinct(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_aggregate(sbl_cmd_ctx_t *ctx, sbl_err_t *err);

/* handshake.c: end an awaitable hello of a closing connection (sbl_cmd_conn_close). */
void sbl_hello_wait_cancel(sbl_client_t *client);

/* handshake.c, admin.c, diag.c */
int sbl_cmd_hello(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_build_info(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_ping(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_get_parameter(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_get_cmd_line_opts(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_host_info(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_whatsmyuri(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_list_commands(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_connection_status(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_server_status(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_get_last_error(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_get_log(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_start_session(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_end_sessions(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_shutdown_cmd(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_create(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_drop(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_drop_database(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_list_databases(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_list_collections(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_rename_collection(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_coll_stats(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_db_stats(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_list_indexes(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_create_indexes(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_drop_indexes(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
/* coll_mod.c */
int sbl_cmd_coll_mod(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
/* explain.c */
int sbl_cmd_explain(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_fsync(sbl_cmd_ctx_t *ctx, sbl_err_t *err);

/* monitor_cmds.c */
int sbl_cmd_top(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_current_op(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_kill_op(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_profile(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
/* validate.c */
int sbl_cmd_validate(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
/* compact.c */
int sbl_cmd_compact(sbl_cmd_ctx_t *ctx, sbl_err_t *err);

/* auth_cmds.c: authentication commands and the dispatcher's authorization check */
int sbl_cmd_sasl_start(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_sasl_continue(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_authenticate(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_logout(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
/* The dispatcher's check, after lookup and before the handler: 0 when the
 * connection may run def (always when authorization is off or ctx->conn is
 * NULL); Unauthorized (13) otherwise. */
int sbl_cmd_auth_check(sbl_cmd_ctx_t *ctx, const sbl_cmd_def_t *def, sbl_err_t *err);
/* Whether the connection has passed authorization checks as someone, and the
 * check for one more action inside a handler (e.g. updateUser's roles). */
int sbl_cmd_auth_require(sbl_cmd_ctx_t *ctx, const char *action, const char *db,
                         const char *coll, sbl_err_t *err);
/* Milliseconds to hold back the reply to a failed authentication (grows with
 * the connection's failures). */
int sbl_cmd_auth_fail_delay_ms(const sbl_client_t *c);
/* Free the client's authentication state (connection close). */
void sbl_cmd_auth_client_free(sbl_client_t *c);
/* hello: append saslSupportedMechs for "db.user" (nothing when the user does
 * not exist) and run speculativeAuthenticate (the reply field is omitted when
 * it fails). */
void sbl_cmd_auth_hello_mechs(sbl_cmd_ctx_t *ctx, const char *db_user);
void sbl_cmd_auth_hello_speculative(sbl_cmd_ctx_t *ctx, const bson_iter_t *it);
/* connectionStatus's authInfo */
void sbl_cmd_auth_append_status(sbl_cmd_ctx_t *ctx, bool show_privileges, bson_t *info);

/* audit_cmds.c: audit events (src/audit) and the audit commands.
 * sbl_cmd_audit_check: the dispatcher's call after prepare (rc is prepare's
 * result): emits authCheck for failed authorization, and for every command
 * when auditAuthorizationSuccess is on; returns rc, or the audit log's error
 * when the event cannot be recorded (the command is refused).
 * sbl_cmd_audit_wait: true when the command's last event is not yet written;
 * cb(arg, rc) then runs on the audit writer thread once it is. */
int sbl_cmd_audit_check(sbl_cmd_ctx_t *ctx, int rc, sbl_err_t *err);
bool sbl_cmd_audit_wait(sbl_cmd_ctx_t *ctx, void (*cb)(void *arg, int rc), void *arg);
/* Record an event about this connection (recorded even while the audit log
 * fails: it is written once it works again; the reply waits for it). */
void sbl_cmd_audit(sbl_cmd_ctx_t *ctx, const char *atype, const bson_t *param, int result);
void sbl_cmd_audit_ns(sbl_cmd_ctx_t *ctx, const char *atype, const char *ns);
/* createCollection, preceded by createDatabase when ns is its database's first. */
void sbl_cmd_audit_coll_created(sbl_cmd_ctx_t *ctx, const char *ns);
void sbl_cmd_audit_index(sbl_cmd_ctx_t *ctx, const char *atype, const char *ns, const char *name,
                         const bson_t *spec);
void sbl_cmd_audit_rename(sbl_cmd_ctx_t *ctx, const char *from, const char *to);
/* A user or role command's event (atype = its name) when rc is 0; returns rc. */
int sbl_cmd_audit_user_result(sbl_cmd_ctx_t *ctx, int rc);
void sbl_cmd_audit_authenticate(sbl_cmd_ctx_t *ctx, const char *mech, const char *user,
                                const char *db, int result);
void sbl_cmd_audit_logout(sbl_cmd_ctx_t *ctx);
void sbl_cmd_audit_client_metadata(sbl_cmd_ctx_t *ctx, const bson_t *metadata);
int sbl_cmd_log_application_message(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_get_audit_config(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_set_audit_config(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_set_parameter(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_log_rotate(sbl_cmd_ctx_t *ctx, sbl_err_t *err);

/* user_cmds.c: users and roles */
int sbl_cmd_create_user(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_update_user(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_drop_user(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_drop_all_users(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_users_info(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_grant_roles_to_user(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_revoke_roles_from_user(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_create_role(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_update_role(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_drop_role(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_drop_all_roles(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_roles_info(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_grant_privileges_to_role(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_revoke_privileges_from_role(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_grant_roles_to_role(sbl_cmd_ctx_t *ctx, sbl_err_t *err);
int sbl_cmd_revoke_roles_from_role(sbl_cmd_ctx_t *ctx, sbl_err_t *err);

#endif
