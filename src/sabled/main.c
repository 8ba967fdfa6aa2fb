/*
 * main.c: sabled's process life.  Parse options, (optionally) fork, open the
 * log, the storage engine, the command layer and the network, then wait for
 * SIGTERM/SIGINT or the shutdown command and take everything down in the
 * reverse order.
 *
 * Signals: SIGTERM, SIGINT, SIGHUP and SIGUSR1 are blocked in every thread
 * (the mask is set before any thread starts) and collected by the main thread
 * with sigwait(), so no handler ever runs inside another thread's code.
 * SIGUSR1 reopens the log file (rotation); SIGHUP is ignored.
 */
#include "audit/audit.h"
#include "cmd/cmd.h"
#include "common/log.h"
#include "metrics/metrics.h"
#include "net/net.h"
#include "repl/repl.h"
#include "server/server.h"
#include "storage/storage.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static sbl_options_t options;

#ifdef SABLE_JEMALLOC
/*
 * jemalloc's options, read when it starts (MALLOC_CONF in the environment
 * still overrides them).  Its memory on transparent huge pages: on this
 * kind of virtual machine the first touch of a 4 KiB page costs ~18 us,
 * and an insert's new WiredTiger update touched a third of a fresh page;
 * with 2 MiB pages an insert-only run went from 0.33 page faults and
 * 47 us of server CPU per insert to 0.001 and 31 us (docs/BENCHMARKS.md,
 * "Design choices measured").  Where huge pages are off (transparent_hugepage "never")
 * the madvise it makes does nothing.
 *
 * And freed memory is kept rather than given back (no decay purging): a
 * purged range inside a huge page is faulted back in as a new 2 MiB page,
 * zeroed whole, so with purging on, thp made updates slower (one run each,
 * 1M records, 8 threads, updates/s: 23,075 with purging, 29,922 without,
 * 27,181 with neither thp nor the change).  Resident memory then stays at
 * its high-water mark, which the WiredTiger cache bounds.
 */
const char *malloc_conf = "thp:always,metadata_thp:always,dirty_decay_ms:-1,muzzy_decay_ms:-1";
#endif


static void log_startup(void)
{
    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_INT32(&attr, "pid", (int32_t)getpid());
    BSON_APPEND_INT32(&attr, "port", options.port);
    BSON_APPEND_UTF8(&attr, "dbPath", options.dbpath);
    BSON_APPEND_UTF8(&attr, "architecture", "64-bit");
    BSON_APPEND_UTF8(&attr, "host", sbl_server_host());
    sbl_log(SBL_LOG_INFO, "CONTROL", 4615611, "sabled starting", &attr);
    bson_destroy(&attr);

    bson_init(&attr);
    bson_t bi;
    BSON_APPEND_DOCUMENT_BEGIN(&attr, "buildInfo", &bi);
    BSON_APPEND_UTF8(&bi, "version", SBL_VERSION);
    BSON_APPEND_UTF8(&bi, "gitVersion", SBL_GIT_VERSION);
    BSON_APPEND_UTF8(&bi, "storageEngine", "wiredTiger");
    bson_append_document_end(&attr, &bi);
    sbl_log(SBL_LOG_INFO, "CONTROL", 23403, "Build Info", &attr);
    bson_destroy(&attr);

    bson_init(&attr);
    BSON_APPEND_DOCUMENT(&attr, "options", &options.parsed);
    sbl_log(SBL_LOG_INFO, "CONTROL", 21951, "Options set by command line", &attr);
    bson_destroy(&attr);
}

/* Open the audit log (after storage: its fdatasync joins the journal's
 * group commit) and record the startup event. */
static int audit_start(sbl_err_t *err)
{
    bson_t filter, p = BSON_INITIALIZER;
    bson_error_t je;
    bson_iter_t it;
    bool have_filter = options.audit_filter != NULL &&
                       bson_init_from_json(&filter, options.audit_filter, -1, &je);
    sbl_audit_config_t cfg = {
        .destination = (sbl_audit_dest_t)options.audit_destination,
        .format = options.audit_format ? SBL_AUDIT_BSON : SBL_AUDIT_JSON,
        .path = options.audit_path,
        .filter = have_filter ? &filter : NULL,
    };
    if (bson_iter_init_find(&it, &options.parameters, "auditAuthorizationSuccess") &&
        BSON_ITER_HOLDS_UTF8(&it))
        cfg.auth_success = strcmp(bson_iter_utf8(&it, NULL), "true") == 0 ||
                           strcmp(bson_iter_utf8(&it, NULL), "1") == 0;
    int rc = sbl_audit_open(&cfg, err);
    if (have_filter)
        bson_destroy(&filter);
    if (rc != 0)
        return rc;
    sbl_storage_set_flush_hook(sbl_audit_sync);
    uint64_t seq;
    BSON_APPEND_DOCUMENT(&p, "options", &options.parsed);
    sbl_audit_event("startup", NULL, &p, 0, true, &seq, err);
    bson_destroy(&p);
    return 0;
}

static void audit_stop(void)
{
    sbl_storage_set_flush_hook(NULL);
    sbl_audit_close();
}

static int write_pidfile(void)
{
    if (options.pidfile == NULL)
        return 0;
    FILE *f = fopen(options.pidfile, "w");
    if (f == NULL)
        return errno;
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    return 0;
}

/* Log a failed start-up step (component, mongod's log id, message, and the
 * error as its attribute) and say it on stderr, which the parent of --fork
 * and the launcher show. */
static void startup_error(char severity, const char *component, int id, const char *msg,
                          const sbl_err_t *err)
{
    bson_t attr;
    bson_init(&attr);
    BSON_APPEND_UTF8(&attr, "error", err->msg);
    sbl_log(severity, component, id, msg, &attr);
    bson_destroy(&attr);
    fprintf(stderr, "sabled: %s\n", err->msg);
}

static int run(int notify_fd)
{
    sbl_err_t err;
    bson_t attr;
    int exit_code = 100; /* a failed start-up step's exit status (mongod's) */

    sbl_err_clear(&err);
    struct stat st;
    if (stat(options.dbpath, &st) != 0 || !S_ISDIR(st.st_mode)) {
        bson_init(&attr);
        BSON_APPEND_UTF8(&attr, "dbpath", options.dbpath);
        sbl_log(SBL_LOG_FATAL, "STORAGE", 20557,
                "Data directory not found. Create the missing directory or specify another path "
                "using (1) the --dbpath command line option, or (2) by adding the 'storage.dbPath' "
                "option in the configuration file.", &attr);
        bson_destroy(&attr);
        fprintf(stderr, "sabled: data directory %s not found\n", options.dbpath);
        return 100;
    }

    /* before replication and sharding dial anyone; the files are read once, here */
    if (sbl_client_tls_start(&options, &err) != 0) {
        startup_error(SBL_LOG_FATAL, "NETWORK", 23248, "Cannot set up TLS for member connections",
                      &err);
        return 48;
    }
    sbl_storage_config_t scfg = {
        .dbpath = options.dbpath,
        .cache_size_gb = options.cache_size_gb,
        .journal_compressor = options.journal_compressor,
        .commit_interval_ms = options.commit_interval_ms,
        .syncdelay_s = options.syncdelay_s,
        .wt_config = options.wt_config,
        .wt_coll_config = options.wt_coll_config,
        .wt_index_config = options.wt_index_config,
    };
    bson_iter_t ttl_it;
    if (bson_iter_init_find(&ttl_it, &options.parameters, "ttlMonitorSleepSecs") &&
        BSON_ITER_HOLDS_UTF8(&ttl_it))
        scfg.ttl_monitor_sleep_s = atoi(bson_iter_utf8(&ttl_it, NULL));
    /* Free-space guard (src/storage/wt_space.c): writes stop below this many MB free. */
    if (bson_iter_init_find(&ttl_it, &options.parameters, "minFreeDiskSpaceMB") &&
        BSON_ITER_HOLDS_UTF8(&ttl_it)) {
        char *end;
        long long mb = strtoll(bson_iter_utf8(&ttl_it, NULL), &end, 10);
        if (*end != '\0' || end == bson_iter_utf8(&ttl_it, NULL) || mb < 0 || mb > (1LL << 40)) {
            fprintf(stderr, "sabled: Bad value for parameter \"minFreeDiskSpaceMB\": %s "
                    "(a number of MB >= 0; 0 turns the free-space guard off)\n",
                    bson_iter_utf8(&ttl_it, NULL));
            return 2;
        }
        sbl_storage_set_min_free_mb(mb);
    }
    if (bson_iter_init_find(&ttl_it, &options.parameters, "replWriterThreadCount") &&
        BSON_ITER_HOLDS_UTF8(&ttl_it)) {
        const char *v = bson_iter_utf8(&ttl_it, NULL);
        char *end;
        long long n = strtoll(v, &end, 10);
        if (*end != '\0' || end == v || n < 1 || n > SBL_REPL_MAX_WRITER_THREADS) {
            fprintf(stderr, "sabled: BadValue: Bad value for parameter \"replWriterThreadCount\": "
                    "%s is not in [1, %d]\n", v, SBL_REPL_MAX_WRITER_THREADS);
            return 2;
        }
        sbl_repl_set_writer_threads((int)n);
    }
    if (sbl_storage_open(&scfg, &err) != 0) {
        startup_error(SBL_LOG_FATAL, "STORAGE", 28595,
                      "Terminating: could not open the storage engine", &err);
        return 100;
    }
    if (audit_start(&err) != 0) {
        fprintf(stderr, "sabled: %s\n", err.msg);
        sbl_storage_close();
        return 2;
    }
    /* Replication before any write can come in: with --replSet the oplog
     * observer is installed and an initiated member becomes PRIMARY again. */
    sbl_repl_config_t rcfg = {.set_name = options.repl_set_name,
                              .oplog_size_mb = options.oplog_size_mb,
                              .dbpath = options.dbpath,
                              .port = options.port,
                              .cluster_key = options.cluster_key};
    if (bson_iter_init_find(&ttl_it, &options.parameters,
                            "expiredChangeStreamPreImageRemovalJobSleepSecs") &&
        BSON_ITER_HOLDS_UTF8(&ttl_it))
        sbl_repl_set_preimage_remover_sleep_s(atoi(bson_iter_utf8(&ttl_it, NULL)));
    if (sbl_repl_start(&rcfg, &err) != 0) {
        startup_error(SBL_LOG_FATAL, "REPL", 40088, "Terminating: could not start replication",
                      &err);
        goto stop_repl;
    }
    if (sbl_cmd_init(&err) != 0) {
        startup_error(SBL_LOG_FATAL, "CONTROL", 20574, "Error during global initialization", &err);
        goto stop_repl;
    }
    /* The applier runs a primary's entries through the command layer. */
    sbl_repl_set_runner(sbl_cmd_run);
    sbl_repl_set_txn_aborter(sbl_cmd_mtxn_abort_all);
    sbl_repl_set_prepared_hook(sbl_cmd_mtxn_apply_prepared);
    if (sbl_repl_start_threads(&err) != 0) {
        startup_error(SBL_LOG_FATAL, "REPL", 40088, "Terminating: could not start replication",
                      &err);
        goto stop_cmd;
    }
    /* after the oplog replay (shardIdentity may have been written after the
     * last checkpoint): a shard that was added before knows its cluster again */
    sbl_cmd_sharding_start();
    /* after the oplog replay, before the network: what a chunk migration
     * left before a restart holds its collection's critical section */
    sbl_cmd_mig_recovery_start();

    sbl_net_config_t ncfg = sbl_net_config_of(&options);
    if (sbl_net_start(&ncfg, sbl_cmd_dispatch, sbl_cmd_conn_open, sbl_cmd_conn_close, &err) != 0) {
        startup_error(SBL_LOG_ERROR, "NETWORK", 23024, "Failed to set up listener", &err);
        exit_code = 48;
        goto stop_cmd;
    }
    sbl_profile_set_defaults(options.profile, options.slowms, options.slow_sample_rate);
    sbl_metrics_http_config_t mcfg = {
        .bind_ip = options.metrics_bind_ip,
        .port = options.metrics_port,
        .auth = options.auth,
        .tls_cert_key_file = options.tls_mode != SBL_TLS_DISABLED ? options.tls_cert_key_file : NULL,
        .tls_cert_key_password = options.tls_cert_key_password,
    };
    if (sbl_metrics_http_start(&mcfg, sbl_cmd_metrics_sources(), &err) != 0) {
        startup_error(SBL_LOG_ERROR, "NETWORK", 23024, "Failed to set up the metrics listener",
                      &err);
        exit_code = 48;
        goto stop_net;
    }
    if (write_pidfile() != 0)
        sbl_log(SBL_LOG_WARNING, "CONTROL", 20575, "Error writing the pid file", NULL);

    bson_init(&attr);
    BSON_APPEND_INT32(&attr, "port", options.port);
    BSON_APPEND_UTF8(&attr, "ssl", options.tls_mode != SBL_TLS_DISABLED ? "on" : "off");
    sbl_log(SBL_LOG_INFO, "NETWORK", 23016, "Waiting for connections", &attr);
    bson_destroy(&attr);
    sbl_server_notify_parent(notify_fd, 0);

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGUSR1);
    for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) != 0)
            continue;
        if (sig == SIGUSR1) {
            sbl_log_reopen();
            sbl_log(SBL_LOG_INFO, "CONTROL", 23166, "Log rotation initiated", NULL);
            if (sbl_audit_rotate(&err) != 0)
                sbl_log(SBL_LOG_ERROR, "CONTROL", 23168, err.msg, NULL);
            continue;
        }
        if (sig == SIGHUP)
            continue;
        bson_init(&attr);
        BSON_APPEND_UTF8(&attr, "signal", sig == SIGINT ? "SIGINT" : "SIGTERM");
        sbl_log(SBL_LOG_INFO, "CONTROL", 23377, "Received signal", &attr);
        bson_destroy(&attr);
        break;
    }

    sbl_log(SBL_LOG_INFO, "CONTROL", 4784900, "Stepping down... shutting down the network", NULL);
    sbl_metrics_http_stop();
    sbl_prepare_shutdown(); /* reads waiting on a prepared transaction end */
    sbl_net_stop();
    sbl_cmd_shutdown();
    uint64_t seq;
    sbl_audit_event("shutdown", NULL, NULL, 0, true, &seq, &err);
    sbl_log(SBL_LOG_INFO, "STORAGE", 4784928, "Shutting down the storage engine", NULL);
    sbl_repl_stop();
    sbl_storage_close();
    audit_stop();
    if (options.pidfile != NULL)
        unlink(options.pidfile);
    bson_init(&attr);
    BSON_APPEND_INT32(&attr, "exitCode", 0);
    sbl_log(SBL_LOG_INFO, "CONTROL", 20565, "Now exiting", &attr);
    bson_destroy(&attr);
    return 0;

    /* A start-up step failed: undo the steps before it, newest first. */
stop_net:
    sbl_net_stop();
stop_cmd:
    sbl_cmd_shutdown();
stop_repl:
    sbl_repl_stop();
    sbl_storage_close();
    audit_stop();
    return exit_code;
}

int main(int argc, char **argv)
{
    sbl_err_t err;
    sbl_err_clear(&err);
    if (sbl_options_parse(argc, argv, &options, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    if (options.action == SBL_ACTION_HELP) {
        fputs(sbl_options_help(), stdout);
        return 0;
    }
    if (options.action == SBL_ACTION_VERSION) {
        printf("db version v%s\nBuild Info: {\n    \"version\": \"%s\",\n"
               "    \"gitVersion\": \"%s\",\n    \"storageEngine\": \"wiredTiger\"\n}\n",
               SBL_VERSION, SBL_VERSION, SBL_GIT_VERSION);
        return 0;
    }
    if (options.fork && options.logpath == NULL) {
        fprintf(stderr, "BadValue: --fork has to be used with --logpath or --syslog\n");
        return 2;
    }

    sbl_server_init(&options);

    if (options.logpath != NULL) {
        int e = sbl_log_open(options.logpath);
        if (e != 0) {
            fprintf(stderr, "sabled: cannot open log file %s: %s\n", options.logpath,
                    strerror(e));
            return 1;
        }
    }
    sbl_log_set_verbosity(options.verbosity);

    int notify_fd = -1;
    if (options.fork && sbl_server_fork(&notify_fd, options.logpath) != 0) {
        fprintf(stderr, "sabled: fork failed: %s\n", strerror(errno));
        return 1;
    }

    /* Before any thread exists: route the signals to sigwait() in run(). */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    sbl_log_set_ctx("initandlisten");
    log_startup();
    int rc = run(notify_fd);
    if (rc != 0)
        sbl_server_notify_parent(notify_fd, 1);
    sbl_log_close();
    sbl_options_destroy(&options);
    return rc;
}
