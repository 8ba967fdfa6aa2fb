/*
 * options.c: command-line parsing for sable-bench (see options.h).
 *
 * Must stay true: properties from -P files are overridden by command-line
 * properties regardless of order (YCSB's Client merges them that way), and
 * the numeric options are validated here so a typo fails before any load.
 */
#include "options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *bench_usage(void)
{
    return "Usage: sable-bench load|run DB [options]\n"
           "  DB            mongodb | redis | postgres\n"
           "  -P file       load a workload property file (repeatable)\n"
           "  -p name=value set a property (repeatable; overrides -P files)\n"
           "  -threads N    client threads (property threadcount, default 1)\n"
           "  -target OPS   total target operations per second (property target)\n"
           "  -s            print a status line every status.interval seconds (default 10) to stderr\n"
           "  -l label      prefix status lines with label\n"
           "  --chart FILE.png  after the run, draw throughput and latency over time with gnuplot,\n"
           "                one point per status.interval seconds (default 10; -s not needed)\n"
           "  -load | -t    YCSB spellings of load / run;  -db NAME  the binding\n"
           "Common properties: recordcount operationcount fieldcount fieldlength readproportion\n"
           "  updateproportion insertproportion scanproportion readmodifywriteproportion\n"
           "  requestdistribution insertorder maxexecutiontime measurement.interval exportfile\n"
           "  mongodb.url mongodb.writeConcern mongodb.readPreference mongodb.upsert mongodb.api batchsize\n"
           "  redis.host redis.port redis.password  postgrenosql.url postgres.url postgrenosql.autocommit\n"
           "mongodb.api: wire (default: each thread's own connection, opened by libmongoc, commands\n"
           "  written and read directly) | command (libmongoc's command API) | crud (its CRUD helpers)\n";
}

static bool is_number(const char *s, bool allow_frac)
{
    char *end;
    if (*s == '\0')
        return false;
    if (allow_frac)
        (void)strtod(s, &end);
    else
        (void)strtol(s, &end, 10);
    return *end == '\0';
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(err, errlen, __VA_ARGS__);                                                        \
        goto fail;                                                                                 \
    } while (0)

int bench_options_parse(bench_options_t *o, int argc, char **argv, char *err, size_t errlen)
{
    memset(o, 0, sizeof(*o));
    bench_props_t fileprops, cmdprops;
    bench_props_init(&fileprops);
    bench_props_init(&cmdprops);
    bench_props_init(&o->props);
    bool have_cmd = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "-help") == 0 || strcmp(a, "--help") == 0) {
            o->help = true;
        } else if (strcmp(a, "-threads") == 0) {
            if (next == NULL || !is_number(next, false) || atoi(next) < 1)
                FAIL("-threads needs a positive number");
            bench_props_set(&cmdprops, "threadcount", next);
            i++;
        } else if (strcmp(a, "-target") == 0) {
            if (next == NULL || !is_number(next, true) || atof(next) < 0)
                FAIL("-target needs a non-negative number of operations per second");
            bench_props_set(&cmdprops, "target", next);
            i++;
        } else if (strcmp(a, "-s") == 0) {
            bench_props_set(&cmdprops, "status", "true");
        } else if (strcmp(a, "-l") == 0) {
            if (next == NULL)
                FAIL("-l needs a label");
            bench_props_set(&cmdprops, "label", next);
            i++;
        } else if (strcmp(a, "--chart") == 0 || strcmp(a, "-chart") == 0) {
            if (next == NULL || next[0] == '\0')
                FAIL("--chart needs a file name");
            if (strlen(next) >= sizeof(o->chart))
                FAIL("--chart: file name too long");
            snprintf(o->chart, sizeof(o->chart), "%s", next);
            i++;
        } else if (strcmp(a, "-P") == 0) {
            if (next == NULL)
                FAIL("-P needs a property file");
            if (bench_props_load_file(&fileprops, next, err, errlen) != 0)
                goto fail;
            i++;
        } else if (strcmp(a, "-p") == 0) {
            if (next == NULL || bench_props_set_pair(&cmdprops, next) != 0)
                FAIL("-p needs name=value");
            i++;
        } else if (strcmp(a, "-load") == 0) {
            o->load = true;
            have_cmd = true;
        } else if (strcmp(a, "-t") == 0) {
            o->load = false;
            have_cmd = true;
        } else if (strcmp(a, "-db") == 0) {
            if (next == NULL)
                FAIL("-db needs a binding name");
            snprintf(o->dbname, sizeof(o->dbname), "%s", next);
            i++;
        } else if (a[0] == '-') {
            FAIL("unknown option %s", a);
        } else if (!have_cmd && (strcmp(a, "load") == 0 || strcmp(a, "run") == 0)) {
            o->load = strcmp(a, "load") == 0;
            have_cmd = true;
        } else if (o->dbname[0] == '\0') {
            snprintf(o->dbname, sizeof(o->dbname), "%s", a);
        } else {
            FAIL("unexpected argument %s", a);
        }
    }
    if (o->help)
        goto done;
    if (!have_cmd)
        FAIL("say load or run");
    if (o->dbname[0] == '\0')
        FAIL("name a database binding (mongodb, redis, postgres)");
    bench_props_set(&cmdprops, "dotransactions", o->load ? "false" : "true");
done:
    if (bench_props_merge(&o->props, &fileprops) != 0 || bench_props_merge(&o->props, &cmdprops) != 0)
        FAIL("out of memory");
    bench_props_free(&fileprops);
    bench_props_free(&cmdprops);
    return 0;
fail:
    bench_props_free(&fileprops);
    bench_props_free(&cmdprops);
    bench_props_free(&o->props);
    return -1;
}
