/*
 * op.h: an operation in progress.  The context every layer that runs part
 * of a client's request gets (the query engine, the aggregation framework,
 * the command handlers, and later replication's applier and transactions):
 * who runs it, its storage session, its deadline and kill flag, where its
 * reply goes and what it counted.  Also the argument checks every operation
 * makes in MongoDB's words, and the two points where an operation calls
 * back into the layer that started it (observers, parking).
 *
 * The command layer (src/cmd) fills a context per command; nothing here
 * knows about commands, connections' state or the command table, so the
 * modules below src/cmd include this header and never a cmd/ one.
 */
#ifndef SBL_OP_H
#define SBL_OP_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/clock.h"
#include "common/errors.h"
#include "doc/doc.h"
#include "metrics/metrics.h"
#include "net/net.h"
#include "storage/storage.h"
#include "wire/wire.h"

#define SBL_NS_MAX 256

/* MongoDB codes that errors.h does not name. */
#define SBL_E_UnknownField 40415
#define SBL_E_UnrecognizedStage 40324
#define SBL_E_MissingField 40414

/* Per-connection state; defined by the command layer (cmd_int.h). */
typedef struct sbl_client sbl_client_t;
/* A retryable write's session state for one command (cmd/retryable.c). */
typedef struct sbl_retry sbl_retry_t;

/* Parsed writeConcern. */
typedef struct sbl_write_concern {
    int w;      /* 0, 1, ... ; "majority" counts as 1 on a single node */
    bool j;     /* wait for the journal */
    bool given; /* the command carried a writeConcern */
    bool majority;      /* w: "majority" (on a replica set member) */
    int64_t wtimeout_ms; /* 0: no limit */
    char mode[64];      /* w: "<getLastErrorModes name>" ("": none) */
} sbl_write_concern_t;

typedef struct sbl_opctx {
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
    bool cursor_awaits; /* a getMore's cursor is tailable awaitData: an empty batch is
                         * not its end (an exhaust stream goes on, dispatch.c) */
    uint64_t audit_seq; /* the last audit event of this command (the reply waits for it) */
    sbl_write_counts_t writes; /* set by insert, update and delete with their reply */
    bool has_lsid;        /* the command ran in a logical session (its lsid) */
    uint8_t lsid_id[16];  /* that session's id (src/sessions; cursors remember it) */
    uint8_t user_uid[32]; /* SHA-256 of the user running it ("user@db"; "" unauthenticated) */
    bool user_bound;      /* authorization is on and a user (not a cluster member) runs it:
                           * the cursors it opens are user_uid's, and it may continue or
                           * kill only its own (set by the command layer's check) */
    sbl_retry_t *retry;   /* a retryable write (lsid + txnNumber), else NULL */
    struct sbl_mtxn *mtxn; /* the multi-document transaction it runs in (cmd/txn.c), or NULL */
    bool mtxn_checked_out; /* the transaction's session is checked out */
    /* the command's startTransaction field (NULL: absent), found by the
     * dispatcher's walk of its fields; valid while the dispatcher runs it */
    const bson_iter_t *start_txn;
    bool close_instead;    /* a test fail point: close the connection instead of replying */
    uint64_t read_ts;      /* a snapshot read's timestamp (readConcern snapshot outside a
                            * transaction; cursors keep it for getMore), 0: none */
    bool read_majority;    /* read_ts is the majority commit point a readConcern majority
                            * read took: replies name no atClusterTime */
    uint64_t open_ts;      /* a router's command on a shard: the newest write's timestamp
                            * when it began (cursors keep it, cmd/snapshot_read.c), 0: none */
    struct sbl_shard_filter *shard_filter; /* a router's read or write on a shard: the
                            * ownership filter its executor and writes apply (src/shard;
                            * dispatch.c's reference), NULL: none */
} sbl_opctx_t;

/* ---- namespaces (op.c) ---------------------------------------------------- */

/* Build "db.coll" from ctx->db and the string value of the command's first
 * field; validate both as MongoDB does (InvalidNamespace 73). */
int sbl_op_ns(const sbl_opctx_t *ctx, char *ns, size_t nslen, sbl_err_t *err);
/* Validate a database name / full namespace (InvalidNamespace 73). */
int sbl_validate_db_name(const char *db, sbl_err_t *err);
int sbl_validate_ns(const char *ns, sbl_err_t *err);

/* ---- deadlines and interruption (op.c) ------------------------------------ */

/* ExceededTimeLimit check for long loops: MaxTimeMSExpired (50) past the deadline. */
int sbl_op_check_deadline(const sbl_opctx_t *ctx, sbl_err_t *err);

/* A step-down (repl calls sbl_op_note_step_down as the member leaves
 * PRIMARY) ends the writes under way, as mongod kills the operations that
 * hold its global lock in IX mode: each document's write attempt
 * (sbl_op_backoff), a transaction's reads (sbl_op_check_interrupt) and the
 * writes waiting on a prepared transaction make this check.
 * InterruptedDueToReplStateChange (11602) when ctx began before the last
 * step-down, else 0 (never when ctx has no start time).  The operations
 * that start after it are a secondary's, or a new primary's. */
void sbl_op_note_step_down(void);
int sbl_op_check_step_down(const sbl_opctx_t *ctx, sbl_err_t *err);

/* A rollback (repl calls sbl_op_note_rollback as the member enters
 * ROLLBACK) ends every client operation at its next check (long loops'
 * sbl_op_check_interrupt, the waits on a prepared transaction, the
 * afterClusterTime wait), reads outside transactions too, as mongod kills
 * all user operations before it rolls back, so none holds a WiredTiger
 * transaction when rollback_to_stable runs: InterruptedDueToReplStateChange
 * (11602) when ctx (a client's: ctx->req) began before the last rollback,
 * else 0. */
void sbl_op_note_rollback(void);
int sbl_op_check_rollback(const sbl_opctx_t *ctx, sbl_err_t *err);
/* The rollback's wait for the client operations (those of a connection in
 * the registry) that began before sbl_op_note_rollback: until none is left
 * or until_us (monotonic) passes; returns how many were left (0: none). */
int sbl_op_wait_rollback_ended(int64_t until_us);

/* The check long loops make: Interrupted (11601) once killOp asked this
 * operation to stop, MaxTimeMSExpired (50) past the deadline, 11602 for a
 * client's operation in a transaction after a step-down and for any
 * client's operation after a rollback, else 0. */
static inline int sbl_op_check_interrupt(const sbl_opctx_t *ctx, sbl_err_t *err)
{
    if (sbl_op_is_killed(ctx->op))
        return sbl_err_set(err, SBL_E_Interrupted, "operation was interrupted");
    if (ctx->req != NULL) {
        if (ctx->mtxn != NULL)
            SBL_RET(sbl_op_check_step_down(ctx, err));
        SBL_RET(sbl_op_check_rollback(ctx, err));
    }
    return sbl_op_check_deadline(ctx, err);
}

/* Called before each attempt of one document's write (*attempt counts
 * from 0).  A client's write (ctx->req: not the applier's, nor the server's
 * own) that began before a step-down ends there with 11602, so a
 * multi-document write stops at its next document, as mongod's.  Sleeps a
 * little before retrying after WriteConflict; after one with a prepared
 * transaction, until it commits or aborts (at
 * most SBL_PREPARE_WAIT_SLICE_MS, never past ctx's deadline), and that wait
 * does not count (*attempt goes back one): such a write waits as long as a
 * read does.  Returns 0 to retry, or the error that ends the operation (50
 * past maxTimeMS, 11601 after killOp, 11600 at shutdown, 11602 after a
 * step-down). */
int sbl_op_backoff(const sbl_opctx_t *ctx, int *attempt, sbl_err_t *err);
#define SBL_WRITE_RETRIES 500

/* ---- arguments in MongoDB's words (op_args.c) ----------------------------- */

/* Read an integer-valued field of any numeric type; TypeMismatch (14) when not numeric. */
int sbl_get_int64(const bson_iter_t *it, int64_t *out, sbl_err_t *err);

/*
 * Refuse unknown top-level fields of cmd: every field must be in known
 * (NULL-terminated; the command name itself included) or be generic
 * ($-prefixed, lsid, writeConcern, comment, maxTimeMS ...).  Error 40415
 * "BSON field '<req>.<field>' is an unknown field."
 */
int sbl_check_fields(const bson_t *cmd, const char *req, const char *const *known,
                     sbl_err_t *err);

/* A field sbl_check_fields_visit hands over: its name and value; nonzero
 * (err set) refuses the command. */
typedef int (*sbl_field_fn)(void *arg, const char *key, const bson_iter_t *it, sbl_err_t *err);

/* sbl_check_fields, and in the same walk fn(arg, ...) on each field named
 * in watch (NULL-terminated), in the document's order, until fn fails: its
 * error is returned once every field passed the unknown-field check, as if
 * the fields were read after that check (one walk instead of two). */
int sbl_check_fields_visit(const bson_t *cmd, const char *req, const char *const *known,
                           const char *const *watch, sbl_field_fn fn, void *arg, sbl_err_t *err);

/* TypeMismatch 14: "BSON field '<field>' is the wrong type '<t>', expected type '<expected>'". */
int sbl_type_error(sbl_err_t *err, const char *field, const bson_iter_t *it,
                   const char *expected);

/* Array key for index i (valid until the next call with the same buf). */
const char *sbl_array_key(uint32_t i, char buf[16]);

/* ---- calls back into the layer that runs the operation (op.c) -------------- */

/*
 * Observers: what happened that the layer above wants to hear of, whichever
 * module did it (today: a collection was created, for the audit log; later
 * the oplog's and change streams' observers hang here too).  The command
 * layer installs them once at start-up, before any operation runs.
 */
typedef struct sbl_op_observer {
    /* ns was created by this operation (explicitly or by a first write). */
    void (*coll_created)(sbl_opctx_t *ctx, const char *ns);
} sbl_op_observer_t;
void sbl_op_set_observer(const sbl_op_observer_t *obs);
void sbl_op_coll_created(sbl_opctx_t *ctx, const char *ns);

/*
 * Park the operation's request until something changes or until_us
 * (monotonic) passes: an awaitData getMore with nothing new.  gen is
 * genf() (sbl_op_generation() when genf is NULL) read before the operation
 * looked for data; the request runs again once it moves, unless idlef
 * (optional) says it would still find nothing.  Returns false when the operation cannot
 * be parked (an internal run, or no parking installed): the caller answers
 * at once.  On true, ctx->deferred is set and the caller answers nothing.
 */
typedef uint64_t (*sbl_op_gen_fn)(void);
/* Optional with a genf: the monotonic us before which genf() cannot move
 * (the parked request checks it then, not every few ms). */
typedef int64_t (*sbl_op_due_fn)(void);
/* Optional: called on the request's loop when genf() moved to gen, with the
 * arg given to sbl_op_park: true when the operation run now would still find
 * nothing (having done what that run would have done to its state), so the
 * request waits on for gen to move again without running.  Must not block. */
typedef bool (*sbl_op_idle_fn)(int64_t arg, uint64_t gen);
typedef struct sbl_op_wait {
    sbl_op_gen_fn genf;
    sbl_op_due_fn duef;
    sbl_op_idle_fn idlef;
    int64_t idle_arg;
    uint64_t gen;
    int64_t until_us;
} sbl_op_wait_t;
typedef bool (*sbl_op_park_fn)(sbl_opctx_t *ctx, const sbl_op_wait_t *w);
/* The counter a parked request waits on by default: sbl_capped_generation()
 * unless the layer above installs another (the command layer adds the
 * majority commit point's moves). */
void sbl_op_set_generation(sbl_op_gen_fn fn);
uint64_t sbl_op_generation(void);
void sbl_op_set_park(sbl_op_park_fn fn);
bool sbl_op_park(sbl_opctx_t *ctx, const sbl_op_wait_t *w);
/* Have every parked request run again now, whatever its counter says: a cursor
 * one of them waits on was killed (its getMore then answers CursorKilled). */
void sbl_op_set_unpark(void (*fn)(void));
void sbl_op_unpark_all(void);

#endif
