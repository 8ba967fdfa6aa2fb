/*
 * test_server.c: option parsing (command line and YAML config, with the
 * command line winning), error messages for bad input, and the command
 * table's order (lookup is a binary search, so it must be sorted).
 */
#include "check.h"
#include "cmd/cmd_int.h"
#include "server/server.h"

#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

static int parse(sbl_options_t *o, sbl_err_t *err, int argc, char **argv)
{
    sbl_err_clear(err);
    return sbl_options_parse(argc, argv, o, err);
}

static void test_defaults_and_cli(void)
{
    sbl_options_t o;
    sbl_err_t err;
    char *a1[] = {"sabled", NULL};
    CHECK(parse(&o, &err, 1, a1) == 0);
    CHECK(o.port == 27017 && o.nbind == 1 && strcmp(o.bind_ips[0], "127.0.0.1") == 0);
    CHECK(o.commit_interval_ms == 100 && o.syncdelay_s == 60);
    sbl_options_destroy(&o);

    char *a2[] = {"sabled", "--port", "29999", "--dbpath=/tmp/x", "--bind_ip", "127.0.0.1,::1",
                  "--maxConns", "50", "--wiredTigerCacheSizeGB", "1.5", "--journalCommitInterval",
                  "20", "--syncdelay", "0", "-vv", "--setParameter", "foo=bar", NULL};
    CHECK(parse(&o, &err, 17, a2) == 0);
    CHECK(o.port == 29999);
    CHECK(strcmp(o.dbpath, "/tmp/x") == 0);
    CHECK(o.nbind == 2 && strcmp(o.bind_ips[1], "::1") == 0);
    CHECK(o.max_conns == 50 && o.cache_size_gb == 1.5);
    CHECK(o.commit_interval_ms == 20 && o.syncdelay_s == 0 && o.verbosity == 2);
    bson_iter_t it;
    CHECK(bson_iter_init_find(&it, &o.parameters, "foo") &&
          strcmp(bson_iter_utf8(&it, NULL), "bar") == 0);
    CHECK(bson_iter_init_find(&it, &o.parsed, "net"));
    bson_iter_t sub;
    CHECK(bson_iter_init(&it, &o.parsed) && bson_iter_find_descendant(&it, "net.port", &sub) &&
          bson_iter_int32(&sub) == 29999);
    sbl_options_destroy(&o);

    char *a3[] = {"sabled", "--bind_ip_all", NULL};
    CHECK(parse(&o, &err, 2, a3) == 0 && o.nbind == 2 && strcmp(o.bind_ips[0], "0.0.0.0") == 0);
    sbl_options_destroy(&o);

    char *a4[] = {"sabled", "--help", NULL};
    CHECK(parse(&o, &err, 2, a4) == 0 && o.action == SBL_ACTION_HELP);
    sbl_options_destroy(&o);
    char *a5[] = {"sabled", "--version", NULL};
    CHECK(parse(&o, &err, 2, a5) == 0 && o.action == SBL_ACTION_VERSION);
    sbl_options_destroy(&o);
}

static void test_errors(void)
{
    sbl_options_t o;
    sbl_err_t err;
    char *a1[] = {"sabled", "--nosuch", NULL};
    CHECK(parse(&o, &err, 2, a1) != 0 && strstr(err.msg, "nosuch") != NULL);
    sbl_options_destroy(&o);
    char *a2[] = {"sabled", "--port", "abc", NULL};
    CHECK(parse(&o, &err, 3, a2) != 0 && strstr(err.msg, "net.port") != NULL);
    sbl_options_destroy(&o);
    char *a3[] = {"sabled", "--port", "70000", NULL};
    CHECK(parse(&o, &err, 3, a3) != 0);
    sbl_options_destroy(&o);
    char *a4[] = {"sabled", "--port", NULL};
    CHECK(parse(&o, &err, 2, a4) != 0 && strstr(err.msg, "missing") != NULL);
    sbl_options_destroy(&o);
    char *a5[] = {"sabled", "stray", NULL};
    CHECK(parse(&o, &err, 2, a5) != 0);
    sbl_options_destroy(&o);
    char *a6[] = {"sabled", "--journalCommitInterval", "900", NULL};
    CHECK(parse(&o, &err, 3, a6) != 0);
    sbl_options_destroy(&o);
    char *a7[] = {"sabled", "--config", "/nonexistent/sabled.yaml", NULL};
    CHECK(parse(&o, &err, 3, a7) != 0);
    sbl_options_destroy(&o);
}

static void test_yaml(void)
{
    char path[] = "/tmp/sable_cfg_XXXXXX";
    int fd = mkstemp(path);
    const char *yaml = "net:\n  port: 28111\n  bindIp: 127.0.0.1,::1\n"
                       "storage:\n  dbPath: /tmp/ydb\n  journal:\n    commitIntervalMs: 30\n"
                       "  wiredTiger:\n    engineConfig:\n      cacheSizeGB: 2\n"
                       "systemLog:\n  destination: file\n  path: /tmp/y.log\n"
                       "setParameter:\n  auditAuthorizationSuccess: true\n";
    CHECK(write(fd, yaml, strlen(yaml)) == (ssize_t)strlen(yaml));
    close(fd);

    sbl_options_t o;
    sbl_err_t err;
    char *a1[] = {"sabled", "--config", path, NULL};
    CHECK_MSG(parse(&o, &err, 3, a1) == 0, "%s", err.msg);
    CHECK(o.port == 28111 && strcmp(o.dbpath, "/tmp/ydb") == 0 && o.commit_interval_ms == 30);
    CHECK(o.cache_size_gb == 2.0 && o.logpath && strcmp(o.logpath, "/tmp/y.log") == 0);
    CHECK(o.nbind == 2);
    bson_iter_t it, sub;
    CHECK(bson_iter_init(&it, &o.parsed) &&
          bson_iter_find_descendant(&it, "storage.journal.commitIntervalMs", &sub));
    CHECK(bson_iter_init_find(&it, &o.parsed, "config"));
    sbl_options_destroy(&o);

    /* The command line wins over the file. */
    char *a2[] = {"sabled", "-f", path, "--port", "28222", NULL};
    CHECK(parse(&o, &err, 5, a2) == 0 && o.port == 28222);
    CHECK(bson_iter_init(&it, &o.parsed) && bson_iter_find_descendant(&it, "net.port", &sub) &&
          bson_iter_int32(&sub) == 28222);
    sbl_options_destroy(&o);

    /* Unknown keys and malformed YAML are errors. */
    fd = open(path, O_WRONLY | O_TRUNC);
    const char *bad = "net:\n  portt: 1\n";
    CHECK(write(fd, bad, strlen(bad)) == (ssize_t)strlen(bad));
    close(fd);
    CHECK(parse(&o, &err, 3, a1) != 0 && strstr(err.msg, "net.portt") != NULL);
    sbl_options_destroy(&o);
    fd = open(path, O_WRONLY | O_TRUNC);
    const char *bad2 = "net: [\n";
    CHECK(write(fd, bad2, strlen(bad2)) == (ssize_t)strlen(bad2));
    close(fd);
    CHECK(parse(&o, &err, 3, a1) != 0);
    sbl_options_destroy(&o);
    unlink(path);
}

static void test_command_table(void)
{
    size_t n;
    const sbl_cmd_def_t *t = sbl_cmd_table(&n);
    CHECK(n > 20);
    for (size_t i = 1; i < n; i++)
        CHECK_MSG(strcmp(t[i - 1].name, t[i].name) < 0, "%s before %s", t[i - 1].name, t[i].name);
    for (size_t i = 0; i < n; i++)
        CHECK(sbl_cmd_lookup(t[i].name) == &t[i]);
    CHECK(sbl_cmd_lookup("nosuchcommand") == NULL);
    CHECK(sbl_cmd_lookup("ismaster") != NULL && sbl_cmd_lookup("isMaster") != NULL);
}

int main(void)
{
    test_defaults_and_cli();
    test_errors();
    test_yaml();
    test_command_table();
    return CHECK_DONE("test_server");
}
