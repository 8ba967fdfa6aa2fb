/*
 * main.c: sable-router's process life (MongoDB's mongos).  Parse options
 * (mongos's: --configdb cfgRS/host:port,..., --port, --bind_ip, --config
 * YAML with sharding.configDB, --logpath, --fork; sabled's --metricsPort
 * and --metricsBindIp), connect to the config servers, listen, and wait for
 * SIGTERM/SIGINT; then close the metrics endpoint, the listener, the
 * cursors and the pools.  It keeps no data of its own.
 */
#include "common/log.h"
#include "metrics/metrics.h"
#include "net/net.h"
#include "router/router.h"
#include "server/server.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static sbl_options_t options;


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
        printf("mongos version v%s (sable-router)\n", SBL_VERSION);
        return 0;
    }
    if (options.config_db == NULL) {
        fprintf(stderr, "BadValue: error: no args for --configdb\n");
        return 2;
    }
    if (options.fork && options.logpath == NULL) {
        fprintf(stderr, "BadValue: --fork has to be used with --logpath or --syslog\n");
        return 2;
    }
    sbl_server_init(&options);
    if (options.logpath != NULL) {
        int e = sbl_log_open(options.logpath);
        if (e != 0) {
            fprintf(stderr, "sable-router: cannot open log file %s: %s\n", options.logpath,
                    strerror(e));
            return 1;
        }
    }
    sbl_log_set_verbosity(options.verbosity);
    int notify_fd = -1;
    if (options.fork && sbl_server_fork(&notify_fd, options.logpath) != 0) {
        fprintf(stderr, "sable-router: fork failed: %s\n", strerror(errno));
        return 1;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* Every routed command blocks a worker while shards answer: room for
     * many clients at once (libuv reads this when its pool starts). */
    if (getenv("UV_THREADPOOL_SIZE") == NULL)
        setenv("UV_THREADPOOL_SIZE", "128", 1);
    sbl_log_set_ctx("mongosMain");

    /* the router's connections to the config servers and shards */
    if (sbl_client_tls_start(&options, &err) != 0) {
        fprintf(stderr, "sable-router: %s\n", err.msg);
        sbl_server_notify_parent(notify_fd, 1);
        return 48;
    }
    if (sbl_router_init(options.config_db, &err) != 0) {
        fprintf(stderr, "sable-router: cannot reach the config servers %s: %s\n",
                options.config_db, err.msg);
        sbl_server_notify_parent(notify_fd, 1);
        return 1;
    }
    sbl_net_config_t ncfg = sbl_net_config_of(&options);
    if (sbl_net_start(&ncfg, sbl_router_dispatch, NULL, NULL, &err) != 0) {
        fprintf(stderr, "sable-router: %s\n", err.msg);
        sbl_router_shutdown();
        sbl_server_notify_parent(notify_fd, 1);
        return 48;
    }
    /* --metricsPort: the same endpoint and page as sabled's, with the shards'
     * members (polled on a thread of their own) instead of a replica set. */
    sbl_metrics_http_config_t mcfg = {
        .bind_ip = options.metrics_bind_ip,
        .port = options.metrics_port,
        .auth = options.auth, /* --keyFile: logins off loopback, as sabled's page */
        .tls_cert_key_file = options.tls_mode != SBL_TLS_DISABLED ? options.tls_cert_key_file : NULL,
        .tls_cert_key_password = options.tls_cert_key_password,
    };
    if (options.metrics_port > 0 &&
        (sbl_router_watch_start(&err) != 0 ||
         sbl_metrics_http_start(&mcfg, sbl_router_metrics_sources(), &err) != 0)) {
        fprintf(stderr, "sable-router: %s\n", err.msg);
        sbl_net_stop();
        sbl_router_shutdown();
        sbl_server_notify_parent(notify_fd, 1);
        return 48;
    }
    if (options.pidfile != NULL) {
        FILE *f = fopen(options.pidfile, "w");
        if (f != NULL) {
            fprintf(f, "%d\n", (int)getpid());
            fclose(f);
        }
    }
    bson_t attr = BSON_INITIALIZER;
    BSON_APPEND_INT32(&attr, "port", options.port);
    BSON_APPEND_UTF8(&attr, "configdb", options.config_db);
    sbl_log(SBL_LOG_INFO, "NETWORK", 23016, "Waiting for connections", &attr);
    bson_destroy(&attr);
    sbl_server_notify_parent(notify_fd, 0);
    for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) == 0 && sig != SIGHUP)
            break;
    }
    sbl_metrics_http_stop();
    sbl_net_stop();
    sbl_router_shutdown();
    if (options.pidfile != NULL)
        unlink(options.pidfile);
    sbl_log_close();
    sbl_options_destroy(&options);
    return 0;
}
