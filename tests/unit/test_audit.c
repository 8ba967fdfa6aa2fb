/*
 * test_audit.c: the audit log module on its own (src/audit): the event
 * document's shape, the filter (at open and replaced), ordering and exactly
 * once across rotation from several threads, sbl_audit_written/on_written,
 * BSON format, and an unwritable file refusing events.
 */
#include "audit/audit.h"
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

static size_t count_lines(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    char line[8192];
    size_t n = 0;
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (needle == NULL || strstr(line, needle) != NULL)
            n++;
    fclose(f);
    return n;
}

static int emit_msg(const char *atype, int i, uint64_t *seq)
{
    sbl_err_t err;
    bson_t p = BSON_INITIALIZER;
    BSON_APPEND_INT32(&p, "i", i);
    uint8_t uuid[16] = {1, 2, 3};
    sbl_audit_client_t c = {.uuid = uuid, .local = "127.0.0.1:27017",
                            .remote = "[::1]:5000", .user = "u", .user_db = "admin"};
    int rc = sbl_audit_event(atype, &c, &p, 0, false, seq, &err);
    bson_destroy(&p);
    return rc;
}

static void *thread_main(void *arg)
{
    uint64_t seq;
    for (int i = 0; i < 2000; i++)
        emit_msg("applicationMessage", i, &seq);
    return arg;
}

static atomic_int called;
static void on_written(void *arg, int rc)
{
    atomic_fetch_add(&called, rc == 0 ? 1 : 100);
}

static void test_json_rotation(void)
{
    char path[300], rotated[4096] = "";
    snprintf(path, sizeof(path), "%s/a.json", dir);
    sbl_err_t err;
    sbl_audit_config_t cfg = {.destination = SBL_AUDIT_FILE, .format = SBL_AUDIT_JSON,
                              .path = path};
    CHECK(sbl_audit_open(&cfg, &err) == 0);
    CHECK(sbl_audit_enabled());
    uint64_t seq = 0;
    CHECK(emit_msg("startup", 0, &seq) == 0 && seq == 1);
    sbl_audit_on_written(seq, on_written, NULL);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, thread_main, NULL);
    for (int r = 0; r < 5; r++) {
        usleep(2000);
        CHECK(sbl_audit_rotate(&err) == 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    CHECK(emit_msg("last", 0, &seq) == 0 && seq == 8002);
    while (!sbl_audit_written(seq))
        usleep(1000);
    sbl_audit_close();
    CHECK(atomic_load(&called) == 1);

    /* Every event exactly once over the current and the rotated files. */
    size_t total = count_lines(path, NULL), files = 1;
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "ls %s/a.json.* 2>/dev/null", dir);
    FILE *ls = popen(cmd, "r");
    while (ls != NULL && fgets(rotated, sizeof(rotated), ls) != NULL) {
        rotated[strcspn(rotated, "\n")] = '\0';
        total += count_lines(rotated, NULL);
        files++;
    }
    if (ls != NULL)
        pclose(ls);
    CHECK_MSG(total == 8002, "%zu events", total);
    CHECK(files >= 2);
    CHECK(count_lines(path, "\"atype\" : \"last\"") == 1);
    CHECK(count_lines(path, "\"local\" : { \"ip\" : \"127.0.0.1\", \"port\" : 27017 }") >= 1);
    CHECK(count_lines(path, "\"remote\" : { \"ip\" : \"::1\", \"port\" : 5000 }") >= 1);
    CHECK(count_lines(path, "\"users\" : [ { \"user\" : \"u\", \"db\" : \"admin\" } ]") >= 1);
}

static void test_filter_bson(void)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/b.bson", dir);
    sbl_err_t err;
    bson_t *f = bson_new_from_json((const uint8_t *)"{\"param.i\": {\"$gte\": 5}}", -1, NULL);
    sbl_audit_config_t cfg = {.destination = SBL_AUDIT_FILE, .format = SBL_AUDIT_BSON,
                              .path = path, .filter = f};
    CHECK(sbl_audit_open(&cfg, &err) == 0);
    uint64_t seq = 0, last = 0;
    for (int i = 0; i < 10; i++) {
        CHECK(emit_msg("m", i, &seq) == 0);
        CHECK((seq != 0) == (i >= 5));
        if (seq != 0)
            last = seq;
    }
    bson_t *g = bson_new_from_json((const uint8_t *)"{\"atype\": \"other\"}", -1, NULL);
    CHECK(sbl_audit_set_filter(g, &err) == 0);
    CHECK(emit_msg("m", 100, &seq) == 0 && seq == 0);
    CHECK(emit_msg("other", 100, &seq) == 0 && seq == last + 1);
    bson_t *bad = bson_new_from_json((const uint8_t *)"{\"a\": {\"$nope\": 1}}", -1, NULL);
    CHECK(sbl_audit_set_filter(bad, &err) != 0);
    sbl_audit_close();
    bson_destroy(f);
    bson_destroy(g);
    bson_destroy(bad);

    bson_reader_t *r = bson_reader_new_from_file(path, NULL);
    const bson_t *doc;
    bool eof = false;
    int n = 0;
    while (r != NULL && (doc = bson_reader_read(r, &eof)) != NULL) {
        bson_iter_t it;
        CHECK(bson_iter_init_find(&it, doc, "ts") && BSON_ITER_HOLDS_DATE_TIME(&it));
        CHECK(bson_iter_init_find(&it, doc, "uuid") && BSON_ITER_HOLDS_BINARY(&it));
        CHECK(bson_iter_init_find(&it, doc, "result") && BSON_ITER_HOLDS_INT32(&it));
        n++;
    }
    CHECK(eof);
    CHECK(n == 6);
    if (r != NULL)
        bson_reader_destroy(r);
}

static void test_unwritable(void)
{
    sbl_err_t err;
    sbl_audit_config_t cfg = {.destination = SBL_AUDIT_FILE, .format = SBL_AUDIT_JSON,
                              .path = "/dev/full"};
    CHECK(sbl_audit_open(&cfg, &err) == 0);
    uint64_t seq = 0;
    sbl_audit_event("forced", NULL, NULL, 0, true, &seq, &err); /* kept, fails to write */
    CHECK(seq == 1);
    atomic_store(&called, 0);
    sbl_audit_on_written(seq, on_written, NULL);
    for (int i = 0; i < 200 && sbl_audit_health(&err) == 0; i++)
        usleep(10000);
    CHECK(sbl_audit_health(&err) == 14031);
    CHECK(strstr(err.msg, "audit log write failed") != NULL);
    CHECK(emit_msg("refused", 0, &seq) == 14031 && seq == 0);
    for (int i = 0; i < 200 && atomic_load(&called) == 0; i++)
        usleep(10000);
    CHECK(atomic_load(&called) == 100); /* the waiter learned of the failure */
    sbl_audit_close();
    CHECK(!sbl_audit_enabled());
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/sbl-test-audit-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return 1;
    test_json_rotation();
    test_filter_bson();
    test_unwritable();
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return CHECK_DONE("test_audit");
}
