/*
 * metrics.h: what the server counts about itself, and the registry of the
 * operations running now.  Feeds serverStatus, top, currentOp/killOp, the
 * slow-operation log, the profiler and the Prometheus endpoint.
 *
 * What must stay true: nothing on the request path takes a process-wide
 * lock.  Counters are relaxed atomics (exact, but a reader may see one
 * counter a moment ahead of another); top and the operation registry are
 * split into shards, each with its own mutex, so two requests contend only
 * when they hash to the same shard.
 */
#ifndef SBL_METRICS_H
#define SBL_METRICS_H

#include <bson/bson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/errors.h"

/* ---- opcounters (serverStatus.opcounters) -------------------------------- */

typedef enum {
    SBL_OPC_INSERT,
    SBL_OPC_QUERY,
    SBL_OPC_UPDATE,
    SBL_OPC_DELETE,
    SBL_OPC_GETMORE,
    SBL_OPC_COMMAND,
    SBL_OPC_COUNT
} sbl_opc_t;

typedef struct sbl_opcounters {
    int64_t insert, query, update, del, getmore, command;
} sbl_opcounters_t;

/* Add n to one opcounter. */
void sbl_metrics_count_op(sbl_opc_t kind, int64_t n);
void sbl_metrics_get_opcounters(sbl_opcounters_t *out);

/* ---- latencies (serverStatus.opLatencies, Prometheus histograms) --------- */

typedef enum {
    SBL_LAT_READS,
    SBL_LAT_WRITES,
    SBL_LAT_COMMANDS,
    SBL_LAT_TRANSACTIONS,
    SBL_LAT_COUNT
} sbl_lat_class_t;

/* Histogram upper bounds in microseconds; one more bucket (+Inf) follows the last. */
#define SBL_LAT_NBOUNDS 16
extern const int64_t sbl_lat_bounds_us[SBL_LAT_NBOUNDS];

typedef struct sbl_latency {
    int64_t latency_us; /* sum of the durations */
    int64_t ops;
    int64_t buckets[SBL_LAT_NBOUNDS + 1]; /* per bucket, not cumulative; last is +Inf */
} sbl_latency_t;

void sbl_metrics_record_latency(sbl_lat_class_t cls, int64_t micros);
void sbl_metrics_get_latency(sbl_lat_class_t cls, sbl_latency_t *out);

/* ---- documents (serverStatus.metrics.document) ---------------------------- */

typedef enum {
    SBL_DOC_RETURNED,
    SBL_DOC_INSERTED,
    SBL_DOC_UPDATED,
    SBL_DOC_DELETED,
    SBL_DOC_COUNT
} sbl_doc_kind_t;

void sbl_metrics_count_docs(sbl_doc_kind_t kind, int64_t n);
int64_t sbl_metrics_get_docs(sbl_doc_kind_t kind);

/* ---- per command (serverStatus.metrics.commands) -------------------------
 * Commands are identified by their row in the command table; the caller
 * maps rows to names. */
#define SBL_METRICS_MAX_COMMANDS 256
void sbl_metrics_count_command(size_t row, bool failed);
void sbl_metrics_get_command(size_t row, int64_t *totalp, int64_t *failedp);

/* ---- top (per namespace time and count) ----------------------------------- */

typedef enum {
    SBL_TOP_QUERIES,
    SBL_TOP_GETMORE,
    SBL_TOP_INSERT,
    SBL_TOP_UPDATE,
    SBL_TOP_REMOVE,
    SBL_TOP_COMMANDS,
    SBL_TOP_KINDS
} sbl_top_kind_t;

#define SBL_TOP_NS_MAX 256

typedef struct sbl_top_cell {
    int64_t time_us, count;
} sbl_top_cell_t;

typedef struct sbl_top_entry {
    char ns[SBL_TOP_NS_MAX];
    sbl_top_cell_t total, read, write;
    sbl_top_cell_t kind[SBL_TOP_KINDS];
} sbl_top_entry_t;

/* Charge micros to ns under kind; write says whether it counts as writeLock time. */
void sbl_metrics_top_record(const char *ns, sbl_top_kind_t kind, bool write, int64_t micros);
/* A copy of every entry, sorted by ns; the caller free()s it.  NULL with *np = 0 when empty. */
sbl_top_entry_t *sbl_metrics_top_snapshot(size_t *np);
/* Forget ns (collection dropped), or every ns of a database when ns is "db." */
void sbl_metrics_top_forget(const char *ns_or_db_prefix);

/* ---- the registry of running operations (currentOp, killOp) --------------- */

typedef struct sbl_op {
    int64_t opid;           /* set by sbl_op_register */
    uint64_t conn_id;       /* 0 for internal operations */
    const char *client;     /* "ip:port", or NULL; must outlive the registration */
    const char *app_name;   /* client metadata's application name, or NULL */
    const char *db;         /* must outlive the registration */
    const bson_t *cmd;      /* must outlive the registration */
    const char *cmd_name;   /* the command's name */
    const char *op_type;    /* "query", "insert", "update", "remove", "getmore", "command" */
    char ns[SBL_TOP_NS_MAX]; /* "db.coll", or "db.$cmd" */
    const uint8_t *lsid_id;  /* its logical session's id (16 bytes) and uid (32), or NULL; */
    const uint8_t *lsid_uid; /* must outlive the registration */
    int64_t txn_number;      /* the multi-document transaction it runs in, or -1 */
    int64_t start_us;       /* monotonic, set by sbl_op_register */
    int64_t start_ms;       /* wall clock, set by sbl_op_register */
    atomic_int killed;      /* set by sbl_op_kill; long loops poll it */
    /* registry links (private) */
    struct sbl_op *prev, *next;
    unsigned shard;
} sbl_op_t;

/* Give op an opid and start times and make it visible to currentOp.  The
 * caller keeps op (and what it points to) alive until sbl_op_unregister. */
void sbl_op_register(sbl_op_t *op);
void sbl_op_unregister(sbl_op_t *op);
/* Change a registered op's txn_number (under the registry's lock: currentOp
 * may be reading it). */
void sbl_op_set_txn_number(sbl_op_t *op, int64_t txn_number);
/* Ask the operation with this opid to stop.  Returns true when it was found. */
bool sbl_op_kill(int64_t opid);
/* Has someone asked op to stop?  op may be NULL (never killed). */
static inline bool sbl_op_is_killed(const sbl_op_t *op)
{
    return op != NULL && atomic_load_explicit(&((sbl_op_t *)op)->killed, memory_order_relaxed);
}
/* Call fn for every registered operation, one shard at a time, under that
 * shard's lock: fn must be quick and must not call into the registry. */
typedef void (*sbl_op_visit_fn)(const sbl_op_t *op, void *arg);
void sbl_ops_foreach(sbl_op_visit_fn fn, void *arg);
int64_t sbl_ops_active(void);

/* Append cmd to out under key as MongoDB shows it in currentOp, the log and
 * the profiler: whole when small; else {$truncated: "<first bytes as JSON>...",
 * comment: <comment>}. */
void sbl_metrics_append_cmd(bson_t *out, const char *key, const bson_t *cmd);

/* ---- slow operations and the profiler -------------------------------------- */

/* Server-wide thresholds (operationProfiling.slowOpThresholdMs, slowOpSampleRate, mode). */
void sbl_profile_set_defaults(int level, int slowms, double sample_rate);
int sbl_profile_slowms(void);
double sbl_profile_sample_rate(void);
void sbl_profile_set_slowms(int slowms);
void sbl_profile_set_sample_rate(double rate);
/* The profiling level of db (0, 1, 2): its own if set by the profile command, else the default. */
int sbl_profile_level(const char *db);
/* Set db's level; returns the previous one. */
int sbl_profile_set_level(const char *db, int level);

/* The newest entries kept in <db>.system.profile (Sable has no capped collections). */
#define SBL_PROFILE_MAX_ENTRIES 1000

/* What insert, update and delete put in their replies' n, nModified and
 * upserted, handed over by the handler so that the reply is not read back
 * for metrics.document (known false: it is read). */
typedef struct sbl_write_counts {
    bool known;
    int64_t n, nmodified, nupserted;
} sbl_write_counts_t;

/* What a finished command reports (dispatch fills it, metrics decides the rest). */
typedef struct sbl_op_report {
    const sbl_op_t *op;        /* registry entry: opid, client, db, ns, command */
    int64_t duration_us;
    int rc;                    /* 0 or the error code */
    const char *errmsg;        /* when rc != 0 */
    const bson_t *reply;       /* the handler's reply fields (n, nModified, cursor ...) */
    const char *plan_summary;  /* NULL: none (not a query) */
    int64_t keys_examined, docs_examined;
    int64_t cursor_id;
    int64_t nreturned; /* documents in the reply's cursor batch; -1: count them in reply */
    sbl_write_counts_t writes;
} sbl_op_report_t;

/* Count the reply's documents into metrics.document, and when the operation
 * was slow (or profiling asks for it) write the log line and/or the
 * system.profile entry.  Runs on the thread that finished the command. */
void sbl_metrics_op_done(const sbl_op_report_t *r);

/* ---- the Prometheus endpoint and the monitoring page (http.c, series.c) ---- */

typedef struct sbl_metrics_http_config {
    const char *bind_ip; /* default "127.0.0.1" */
    int port;            /* 0: off */
    /* --auth: when on and bind_ip is not a loopback address, every request
     * needs HTTP basic auth of a user that sources.authorize accepts. */
    bool auth;
    /* TLS (as the server's net.tls): when cert_key_file is set the port
     * speaks HTTPS only, with that certificate. */
    const char *tls_cert_key_file;
    const char *tls_cert_key_password;
} sbl_metrics_http_config_t;

/* A replica-set member as the monitoring page charts it (src/repl fills it). */
#define SBL_METRICS_MAX_MEMBERS 16
typedef struct sbl_metrics_member {
    char name[128]; /* "host:port" */
    int state;      /* MongoDB's member state: 0 STARTUP, 1 PRIMARY, 2 SECONDARY, ... 8 DOWN, 10 REMOVED */
    int64_t lag_ms; /* behind the primary's newest applied optime; -1 when unknown */
} sbl_metrics_member_t;

/* A shard as a router's monitoring page charts it (src/router fills it):
 * its members as the router's poller last saw them, and the router's own
 * traffic to it. */
#define SBL_METRICS_MAX_SHARDS 16
#define SBL_METRICS_MAX_SHARD_MEMBERS 7
typedef struct sbl_metrics_shard {
    char name[64]; /* the shard's _id in config.shards */
    size_t nmembers;
    sbl_metrics_member_t members[SBL_METRICS_MAX_SHARD_MEMBERS];
    int64_t requests;   /* commands the router sent it since start */
    int64_t latency_us; /* their total round-trip time */
} sbl_metrics_shard_t;

/* Extra figures the endpoint asks the rest of the server for (set before
 * start).  A NULL callback means the figure does not exist in this process
 * (sable-router has no cache, journal, audit log or replica set of its own):
 * its series and Prometheus lines are left out. */
typedef struct sbl_metrics_sources {
    void (*connections)(int64_t *current, int64_t *total_created, int64_t *available);
    void (*network)(int64_t *bytes_in, int64_t *bytes_out, int64_t *requests);
    void (*cache)(int64_t *bytes_in_cache, int64_t *bytes_max, int64_t *bytes_dirty);
    /* Journal (WiredTiger log) syncs since start. */
    int64_t (*journal_flushes)(void);
    const char *(*command_name)(size_t row); /* NULL past the last row */
    /* Audit events written since start (NULL: no audit log). */
    uint64_t (*audit_events)(void);
    /* The replica set's members, at most cap into out; returns how many (0 or
     * NULL: not a replica-set member, and the page shows no replication chart). */
    size_t (*repl_members)(sbl_metrics_member_t *out, size_t cap);
    /* A router's shards, at most cap into out; returns how many (NULL: not a
     * router).  Must only copy what a poller thread gathered: it runs on the
     * metrics thread, which never waits on the network. */
    size_t (*shards)(sbl_metrics_shard_t *out, size_t cap);
    /* Whether user (on admin) with password may read the monitoring data
     * (the clusterMonitor role's serverStatus action).  Called on the metrics
     * thread only. */
    bool (*authorize)(const char *user, const char *password);
    /* Multi-document transactions started, committed, aborted, open now
     * (serverStatus.transactions; NULL: none). */
    void (*transactions)(int64_t *started, int64_t *committed, int64_t *aborted, int64_t *open);
} sbl_metrics_sources_t;

/* Start serving GET /metrics (Prometheus), GET / (the monitoring page) and
 * GET /api/series, /api/latest (its data as JSON) on its own thread and
 * loop, and start sampling the page's series every second.  Returns 0 or an
 * error code. */
int sbl_metrics_http_start(const sbl_metrics_http_config_t *cfg, const sbl_metrics_sources_t *src,
                           sbl_err_t *err);
void sbl_metrics_http_stop(void);
/* Render the Prometheus text exposition into out (a bson_string_t). */
void sbl_metrics_render_prometheus(bson_string_t *out, const sbl_metrics_sources_t *src);

/* Process figures: CPU seconds (user + system), resident and virtual bytes. */
void sbl_metrics_process(double *cpu_seconds, int64_t *resident_bytes, int64_t *virtual_bytes);

#endif
