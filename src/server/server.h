/*
 * server.h: the process: options (command line and YAML config), start-up,
 * shutdown, and the few process-wide facts other modules ask for (start
 * time, host name, the parsed options for getCmdLineOpts).
 *
 * The options are parsed once in main() before any thread starts and are
 * read-only afterwards; that is why a plain accessor is safe.
 */
#ifndef SBL_SERVER_H
#define SBL_SERVER_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/errors.h"

#define SBL_VERSION "7.0.14"
#define SBL_VERSION_ARRAY 7, 0, 14, 0
#define SBL_GIT_VERSION "sable"

typedef enum { SBL_ACTION_RUN, SBL_ACTION_HELP, SBL_ACTION_VERSION } sbl_action_t;

/* sharding.clusterRole */
enum { SBL_ROLE_NONE, SBL_ROLE_CONFIGSVR, SBL_ROLE_SHARDSVR };

/* net.tls.mode */
enum { SBL_TLS_DISABLED, SBL_TLS_ALLOW, SBL_TLS_PREFER, SBL_TLS_REQUIRE };

typedef struct sbl_options {
    sbl_action_t action;
    int port;
    char **bind_ips; /* owned; NULL-terminated; an entry with a '/' is a socket path */
    size_t nbind;
    bool unix_socket;          /* net.unixDomainSocket.enabled (--nounixsocket: false) */
    char *unix_socket_prefix;  /* net.unixDomainSocket.pathPrefix; default /tmp */
    int unix_socket_perms;     /* net.unixDomainSocket.filePermissions; default 0700 */
    char *dbpath;
    char *logpath; /* NULL: stdout */
    bool log_append;
    double cache_size_gb;
    const char *journal_compressor; /* "none" (default), "snappy" or "zlib" (static) */
    int max_conns;
    int commit_interval_ms;
    int syncdelay_s;
    bool fork;
    char *pidfile;
    char *wt_config; /* storage.wiredTiger.engineConfig.configString, or NULL */
    char *wt_coll_config;  /* storage.wiredTiger.collectionConfig.configString, or NULL */
    char *wt_index_config; /* storage.wiredTiger.indexConfig.configString, or NULL */
    int nloops;
    int verbosity;
    bool quiet;
    int metrics_port;        /* --metricsPort: Prometheus endpoint; 0 = off */
    char *metrics_bind_ip;   /* --metricsBindIp; default 127.0.0.1 */
    int slowms;              /* operationProfiling.slowOpThresholdMs; default 100 */
    int profile;             /* operationProfiling.mode as 0 off, 1 slowOp, 2 all */
    double slow_sample_rate; /* operationProfiling.slowOpSampleRate; default 1.0 */
    bool auth;               /* --auth / security.authorization: enabled */
    bool js_disabled;        /* --noscripting / security.javascriptEnabled: false */
    int tls_mode;            /* SBL_TLS_DISABLED ... SBL_TLS_REQUIRE (net.tls.mode) */
    char *tls_cert_key_file; /* net.tls.certificateKeyFile (PEM: certificate + key) */
    char *tls_cert_key_password;
    char *tls_ca_file;       /* net.tls.CAFile: verifies client certificates */
    bool tls_allow_no_cert;  /* net.tls.allowConnectionsWithoutCertificates */
    /* the certificate this server presents when it connects to other
     * members and shards (net.tls.clusterFile, clusterPassword; NULL: the
     * certificateKeyFile and its password); the authority that verifies
     * the certificates of those who connect here (net.tls.clusterCAFile;
     * NULL: the CAFile, which always verifies the servers this one dials) */
    char *tls_cluster_file;
    char *tls_cluster_password;
    char *tls_cluster_ca_file;
    bool tls_allow_invalid_certs;     /* net.tls.allowInvalidCertificates */
    bool tls_allow_invalid_hostnames; /* net.tls.allowInvalidHostnames */
    int audit_destination;   /* auditLog.destination: 0 off, 1 file, 2 syslog, 3 console */
    int audit_format;        /* auditLog.format: 0 JSON, 1 BSON */
    char *audit_path;        /* auditLog.path */
    char *audit_filter;      /* auditLog.filter (JSON text, checked to parse) */
    char *repl_set_name;     /* --replSet / replication.replSetName; NULL: standalone */
    char *key_file;          /* --keyFile / security.keyFile; NULL: none */
    char *cluster_key;       /* its key (whitespace removed): __system@local's password */
    int cluster_role;        /* sharding.clusterRole (--configsvr, --shardsvr): SBL_ROLE_* */
    char *config_db;         /* sharding.configDB (sable-router's --configdb), or NULL */
    int oplog_size_mb;       /* --oplogSizeMB / replication.oplogSizeMB; 0: the default */
    bson_t parsed;     /* nested options document as getCmdLineOpts shows it */
    bson_t parameters; /* --setParameter name=value pairs (values as given) */
    int argc;
    char **argv;
} sbl_options_t;

/* Parse argv (and the --config file it names).  Returns 0, or an error code
 * with a message fit to print before exiting non-zero. */
int sbl_options_parse(int argc, char **argv, sbl_options_t *o, sbl_err_t *err);
void sbl_options_destroy(sbl_options_t *o);
/* The --help text. */
const char *sbl_options_help(void);

/* Record the options (kept by the caller for the process lifetime), start time and host. */
void sbl_server_init(const sbl_options_t *o);

/* The libmongoc URI options that make a connection to another member or
 * shard match those of net.h's sbl_client_dial ("tls=true&tlsCAFile=..."):
 * set once at start (sbl_client_tls_start); "" without TLS. */
void sbl_server_set_cluster_uri_opts(const char *opts);
const char *sbl_server_cluster_uri_opts(void);

/* Process-wide facts (valid after start-up). */
const sbl_options_t *sbl_server_options(void);
int64_t sbl_server_start_ms(void);
const char *sbl_server_host(void); /* "hostname:port" */

/* Ask the server to shut down (any thread; async-signal-safe). */
void sbl_server_request_shutdown(void);

/* --fork: the parent waits until the child reports start-up success (one
 * byte on notify_fd, sbl_server_notify_parent) and exits with the matching
 * status; the child starts a session with stdin/out on /dev/null and stderr
 * appended to stderr_path (the log file: what a library or the C runtime
 * prints as the process dies, e.g. a sanitizer's or glibc's abort message,
 * is kept there) or /dev/null when it is NULL or cannot be opened.
 * Returns 0 in the child, -1 when pipe or fork failed. */
int sbl_server_fork(int *notify_fd, const char *stderr_path);
/* Tell the waiting parent of --fork the start-up status (0: success) and
 * close fd; a no-op when fd < 0. */
void sbl_server_notify_parent(int fd, char status);

#endif
