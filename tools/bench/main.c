/*
 * main.c: sable-bench, a YCSB-compatible load generator for Sable, MongoDB,
 * Redis and PostgreSQL.  Parses the command line and hands over to the
 * client; the exit code is non-zero when any operation failed.
 */
#include <mongoc/mongoc.h>
#include <stdio.h>

#include "client.h"
#include "options.h"

/* libmongoc's messages, without its debug lines (one per connection of mongodb.api=wire). */
static void log_quiet(mongoc_log_level_t level, const char *domain, const char *message, void *arg)
{
    if (level < MONGOC_LOG_LEVEL_DEBUG)
        mongoc_log_default_handler(level, domain, message, arg);
}

int main(int argc, char **argv)
{
    bench_options_t o;
    char err[1024];
    if (bench_options_parse(&o, argc, argv, err, sizeof(err)) != 0) {
        fprintf(stderr, "sable-bench: %s\n\n%s", err, bench_usage());
        return 2;
    }
    if (o.help) {
        fputs(bench_usage(), stdout);
        bench_props_free(&o.props);
        return 0;
    }
    mongoc_init();
    mongoc_log_set_handler(log_quiet, NULL);
    int rc = bench_client_run(&o, stdout);
    mongoc_cleanup();
    bench_props_free(&o.props);
    return rc;
}
