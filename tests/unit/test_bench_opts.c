/*
 * test_bench_opts.c: sable-bench's command line and property files: YCSB's
 * option spellings, -p overriding -P whatever the order, Java-properties
 * syntax, and the URL/conninfo each binding derives from its properties.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "db.h"
#include "options.h"
#include "props.h"

static void test_props_parse(void)
{
    bench_props_t p;
    bench_props_init(&p);
    char err[256];
    const char *text = "# comment\n"
                       "! also a comment\n"
                       "recordcount=1000\n"
                       "  operationcount = 2000  \n"
                       "workload:site.ycsb.workloads.CoreWorkload\n"
                       "readallfields true\r\n"
                       "long=a\\\n"
                       "     b\n"
                       "empty=\n"
                       "recordcount=3000\n";
    CHECK(bench_props_parse(&p, text, err, sizeof(err)) == 0);
    CHECK(strcmp(bench_props_str(&p, "recordcount", ""), "3000") == 0); /* later wins */
    CHECK(bench_props_int(&p, "operationcount", 0, NULL) == 2000);
    CHECK(strcmp(bench_props_str(&p, "workload", ""), "site.ycsb.workloads.CoreWorkload") == 0);
    CHECK(bench_props_bool(&p, "readallfields", false));
    CHECK(strcmp(bench_props_str(&p, "long", ""), "ab") == 0);
    CHECK(bench_props_has(&p, "empty") && strcmp(bench_props_get(&p, "empty"), "") == 0);
    CHECK(!bench_props_has(&p, "comment"));
    bool bad = false;
    bench_props_set(&p, "x", "12x");
    CHECK(bench_props_int(&p, "x", 7, &bad) == 7 && bad);
    bad = false;
    CHECK(bench_props_double(&p, "missing", 0.5, &bad) == 0.5 && !bad);
    CHECK(bench_props_set_pair(&p, "a=b=c") == 0 && strcmp(bench_props_get(&p, "a"), "b=c") == 0);
    CHECK(bench_props_set_pair(&p, "noequals") != 0);
    CHECK(bench_props_load_file(&p, "/nonexistent/workloada", err, sizeof(err)) != 0 && strstr(err, "cannot open"));
    bench_props_free(&p);
}

static int parse(bench_options_t *o, char *err, int n, ...)
{
    char *argv[64];
    va_list ap;
    va_start(ap, n);
    argv[0] = "sable-bench";
    for (int i = 0; i < n; i++)
        argv[i + 1] = va_arg(ap, char *);
    va_end(ap);
    return bench_options_parse(o, n + 1, argv, err, 256);
}

static void test_options(void)
{
    char path[] = "/tmp/test_bench_optsXXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    const char *w = "recordcount=1000\noperationcount=1000\nreadproportion=0.5\nthreadcount=3\n";
    CHECK(write(fd, w, strlen(w)) == (ssize_t)strlen(w));
    close(fd);
    char err[256];
    bench_options_t o;
    /* The report's line, with -p before and after -P: command line wins either way. */
    CHECK(parse(&o, err, 11, "run", "mongodb", "-s", "-p", "recordcount=5", "-P", path, "-p", "readproportion=50",
                "-threads", "8") == 0);
    CHECK(!o.load && strcmp(o.dbname, "mongodb") == 0);
    CHECK(bench_props_int(&o.props, "recordcount", 0, NULL) == 5);
    CHECK(bench_props_int(&o.props, "operationcount", 0, NULL) == 1000);
    CHECK(bench_props_double(&o.props, "readproportion", 0, NULL) == 50);
    CHECK(bench_props_int(&o.props, "threadcount", 0, NULL) == 8);
    CHECK(bench_props_bool(&o.props, "status", false));
    CHECK(strcmp(bench_props_str(&o.props, "dotransactions", ""), "true") == 0);
    bench_props_free(&o.props);

    CHECK(parse(&o, err, 6, "load", "redis", "-P", path, "-target", "1000") == 0);
    CHECK(o.load && strcmp(o.dbname, "redis") == 0);
    CHECK(bench_props_int(&o.props, "threadcount", 0, NULL) == 3); /* from the file */
    CHECK(bench_props_double(&o.props, "target", 0, NULL) == 1000);
    CHECK(!bench_props_bool(&o.props, "status", false));
    bench_props_free(&o.props);

    /* YCSB's own spellings */
    CHECK(parse(&o, err, 5, "-db", "site.ycsb.db.MongoDbClient", "-load", "-l", "tag") == 0);
    CHECK(o.load && strcmp(o.dbname, "site.ycsb.db.MongoDbClient") == 0);
    CHECK(strcmp(bench_props_str(&o.props, "label", ""), "tag") == 0);
    CHECK(bench_db_find(o.dbname) == &bench_db_mongodb);
    bench_props_free(&o.props);
    CHECK(bench_db_find("redis") == &bench_db_redis && bench_db_find("postgres") == &bench_db_postgres);
    CHECK(bench_db_find("cassandra") == NULL);

    /* Errors */
    CHECK(parse(&o, err, 3, "run", "mongodb", "-threads") != 0);
    CHECK(parse(&o, err, 4, "run", "mongodb", "-threads", "x") != 0 && strstr(err, "-threads"));
    CHECK(parse(&o, err, 4, "run", "mongodb", "-target", "-5") != 0);
    CHECK(parse(&o, err, 4, "run", "mongodb", "-p", "novalue") != 0);
    CHECK(parse(&o, err, 3, "run", "mongodb", "-bogus") != 0 && strstr(err, "-bogus"));
    CHECK(parse(&o, err, 1, "mongodb") != 0);
    CHECK(parse(&o, err, 1, "run") != 0);
    CHECK(parse(&o, err, 4, "run", "mongodb", "-P", "/nonexistent") != 0);
    CHECK(parse(&o, err, 1, "-h") == 0 && o.help);
    bench_props_free(&o.props);
    unlink(path);
}

static void test_mongo_url(void)
{
    bench_props_t p;
    bench_props_init(&p);
    char url[1024], err[256];
    CHECK(bench_mongo_build_url(&p, url, sizeof(url), err, sizeof(err)) == 0);
    CHECK(strcmp(url, "mongodb://localhost:27017/ycsb?w=1") == 0);
    bench_props_set(&p, "mongodb.url", "mongodb://u:p@127.0.0.1:27017/ycsb?authSource=admin");
    bench_props_set(&p, "mongodb.writeConcern", "unacknowledged");
    CHECK(bench_mongo_build_url(&p, url, sizeof(url), err, sizeof(err)) == 0);
    CHECK(strcmp(url, "mongodb://u:p@127.0.0.1:27017/ycsb?authSource=admin&w=0") == 0);
    bench_props_set(&p, "mongodb.url", "mongodb://h1:1,h2:2");
    bench_props_set(&p, "mongodb.writeConcern", "journaled");
    bench_props_set(&p, "mongodb.readPreference", "secondary_preferred");
    bench_props_set(&p, "mongodb.maxconnections", "300");
    CHECK(bench_mongo_build_url(&p, url, sizeof(url), err, sizeof(err)) == 0);
    CHECK_MSG(strcmp(url, "mongodb://h1:1,h2:2/?maxPoolSize=300&journal=true&readPreference=secondaryPreferred") == 0,
              "%s", url);
    /* The URL's own w= wins over mongodb.writeConcern. */
    bench_props_set(&p, "mongodb.url", "mongodb://h/admin?w=majority");
    bench_props_set(&p, "mongodb.writeConcern", "unacknowledged");
    bench_props_set(&p, "mongodb.maxconnections", "10");
    bench_props_set(&p, "mongodb.readPreference", "primary");
    CHECK(bench_mongo_build_url(&p, url, sizeof(url), err, sizeof(err)) == 0);
    CHECK_MSG(strcmp(url, "mongodb://h/admin?w=majority&maxPoolSize=10&readPreference=primary") == 0, "%s", url);
    bench_props_set(&p, "mongodb.url", "http://h");
    CHECK(bench_mongo_build_url(&p, url, sizeof(url), err, sizeof(err)) != 0);
    bench_props_free(&p);
}

static void test_pg_conninfo(void)
{
    bench_props_t p;
    bench_props_init(&p);
    char ci[1024], err[256];
    CHECK(bench_pg_conninfo(&p, ci, sizeof(ci), err, sizeof(err)) == 0);
    CHECK_MSG(strcmp(ci, "postgresql://127.0.0.1:5432/test?user=postgres") == 0, "%s", ci);
    bench_props_set(&p, "postgrenosql.url", "jdbc:postgresql://127.0.0.1:6000/ycsb");
    bench_props_set(&p, "postgrenosql.user", "bench");
    bench_props_set(&p, "postgrenosql.passwd", "pw");
    CHECK(bench_pg_conninfo(&p, ci, sizeof(ci), err, sizeof(err)) == 0);
    CHECK_MSG(strcmp(ci, "postgresql://127.0.0.1:6000/ycsb?user=bench&password=pw") == 0, "%s", ci);
    bench_props_set(&p, "postgres.url", "host=/tmp port=6000 dbname=ycsb");
    CHECK(bench_pg_conninfo(&p, ci, sizeof(ci), err, sizeof(err)) == 0);
    CHECK(strcmp(ci, "host=/tmp port=6000 dbname=ycsb") == 0);
    bench_props_free(&p);
    bench_props_init(&p);
    bench_props_set(&p, "postgrenosql.url", "postgresql://x");
    CHECK(bench_pg_conninfo(&p, ci, sizeof(ci), err, sizeof(err)) != 0);
    bench_props_free(&p);
}

int main(void)
{
    test_props_parse();
    test_options();
    test_mongo_url();
    test_pg_conninfo();
    return CHECK_DONE("test_bench_opts");
}
