/*
 * test_audit.c: the audit log module on its own (src/audit): the event
 * document's shape, the filter (at open and replaced; it sees only the
 * fields it names, its decisions remembered per thread), ordering and exactly
 * once across rotation from several threads, the writer thread taking every
 * event nobody flushes, sbl_audit_written/flush (the
 * caller's own group write), the JSON formatter against libbson's relaxed
 * extended JSON (fixed and random documents), authCheck's param written
 * from strings (pwd redacted, large commands truncated, lsids of two
 * sessions alternating; atype, command and ns repeating and changing), BSON
 * format, and
 * an unwritable file refusing events.
 */
#include "audit/audit.h"
#include "check.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
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
    CHECK(sbl_audit_flush(seq, &err) == 0 && sbl_audit_written(seq)); /* written by this thread */
    CHECK(count_lines(path, "\"atype\":\"startup\"") == 1);
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
    CHECK(count_lines(path, "\"atype\":\"last\"") == 1);
    CHECK(count_lines(path, "\"local\":{\"ip\":\"127.0.0.1\",\"port\":27017}") >= 1);
    CHECK(count_lines(path, "\"remote\":{\"ip\":\"::1\",\"port\":5000}") >= 1);
    CHECK(count_lines(path, "\"users\":[{\"user\":\"u\",\"db\":\"admin\"}]") >= 1);
}

/* Events nobody flushes are the writer thread's: each one is written even
 * when it arrives while the writer is busy with the one before (the writer
 * once slept through such an event until the next one came). */
static void test_writer_takes_every_event(void)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/w.json", dir);
    sbl_err_t err;
    sbl_audit_config_t cfg = {.destination = SBL_AUDIT_FILE, .format = SBL_AUDIT_JSON,
                              .path = path};
    CHECK(sbl_audit_open(&cfg, &err) == 0);
    int stuck = 0;
    for (int i = 0; i < 100 && stuck == 0; i++) {
        uint64_t seq = 0;
        CHECK(emit_msg("m", i, &seq) == 0 && seq != 0);
        for (int ms = 0; !sbl_audit_written(seq); ms++) {
            if (ms == 3000) {
                stuck = i + 1;
                break;
            }
            usleep(1000);
        }
    }
    CHECK_MSG(stuck == 0, "event %d was not written within 3 s", stuck);
    sbl_audit_close();
    if (stuck == 0)
        CHECK(count_lines(path, "\"atype\":\"m\"") == 100);
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
    {   /* an event larger than the stack buffer it is built in */
        char big[3000];
        memset(big, 'b', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        bson_t p = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&p, "big", big);
        uint8_t uuid[16] = {7};
        sbl_audit_client_t c = {.uuid = uuid, .local = "127.0.0.1:27017", .remote = "1.2.3.4:5"};
        CHECK(sbl_audit_event("other", &c, &p, 0, false, &seq, &err) == 0 && seq == last + 2);
        bson_destroy(&p);
    }
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
    CHECK(n == 7);
    if (r != NULL)
        bson_reader_destroy(r);
}

/* An authCheck of cmd on d.c by u@admin from [::1]:5000, args {cmd: "c", filter: {x: x}}. */
static bool kept(const char *cmd, int x, int result)
{
    sbl_err_t err;
    bson_t param = BSON_INITIALIZER, args = BSON_INITIALIZER, f;
    BSON_APPEND_UTF8(&param, "command", cmd);
    BSON_APPEND_UTF8(&param, "ns", "d.c");
    BSON_APPEND_UTF8(&args, cmd, "c");
    BSON_APPEND_DOCUMENT_BEGIN(&args, "filter", &f);
    BSON_APPEND_INT32(&f, "x", x);
    bson_append_document_end(&args, &f);
    uint8_t uuid[16] = {9};
    sbl_audit_client_t c = {.uuid = uuid, .local = "127.0.0.1:27017",
                            .remote = "[::1]:5000", .user = "u", .user_db = "admin"};
    uint64_t seq = 0;
    int rc = sbl_audit_event_args("authCheck", &c, &param, &args, result, false, &seq, &err);
    bson_destroy(&param);
    bson_destroy(&args);
    return rc == 0 && seq != 0;
}

static void set_filter(const char *json)
{
    sbl_err_t err;
    bson_t *f = bson_new_from_json((const uint8_t *)json, -1, NULL);
    CHECK_MSG(f != NULL && sbl_audit_set_filter(f, &err) == 0, "%s: %s", json, err.msg);
    if (f != NULL)
        bson_destroy(f);
}

/* The filter sees only the event fields it names (and decisions are
 * remembered per thread by those bytes): every kind of path, $or, $nor,
 * param.args, and a replaced filter's decisions gone ($expr, which sees the
 * whole event, needs the server's expression module: test_audit.py). */
static void test_filter_fields(void)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/f.json", dir);
    sbl_err_t err;
    sbl_audit_config_t cfg = {.destination = SBL_AUDIT_FILE, .format = SBL_AUDIT_JSON,
                              .path = path};
    CHECK(sbl_audit_open(&cfg, &err) == 0);
    set_filter("{\"atype\": \"authCheck\", \"param.command\": {\"$in\": [\"insert\", \"find\"]}}");
    for (int i = 0; i < 3; i++) { /* the second and third from the memo */
        CHECK(kept("find", 1, 0));
        CHECK(!kept("update", 1, 0));
        CHECK(kept("insert", 1, 0));
    }
    set_filter("{\"atype\": \"authCheck\", \"param.command\": \"update\"}");
    CHECK(!kept("find", 1, 0) && kept("update", 1, 0));
    set_filter("{\"remote.ip\": \"::1\", \"remote.port\": 5000}");
    CHECK(kept("find", 1, 0));
    set_filter("{\"remote.port\": 5001}");
    CHECK(!kept("find", 1, 0));
    set_filter("{\"users.user\": \"u\", \"users.db\": \"admin\"}");
    CHECK(kept("find", 1, 0));
    set_filter("{\"users\": {\"$size\": 0}}");
    CHECK(!kept("find", 1, 0));
    set_filter("{\"$or\": [{\"result\": 13}, {\"param.args.filter.x\": 1}]}");
    CHECK(kept("find", 1, 0) && !kept("find", 2, 0) && kept("find", 2, 13));
    CHECK(kept("find", 1, 0) && !kept("find", 2, 0));
    set_filter("{\"uuid\": {\"$exists\": true}, \"ts\": {\"$exists\": true}, "
               "\"local.port\": 27017, \"roles\": {\"$size\": 0}, \"result\": 0}");
    CHECK(kept("find", 1, 0) && !kept("find", 1, 13));
    set_filter("{\"param.ns\": \"d.c\", \"param.args\": {\"$exists\": true}}");
    CHECK(kept("find", 1, 0));
    set_filter("{\"param.args\": {\"$exists\": false}}");
    CHECK(!kept("find", 1, 0));
    set_filter("{\"$nor\": [{\"param.command\": \"find\"}], \"$comment\": \"x\"}");
    CHECK(!kept("find", 1, 0) && kept("update", 1, 0));
    set_filter("{\"nothere\": {\"$exists\": false}}");
    CHECK(kept("find", 1, 0));
    sbl_audit_close();
}

/* An authCheck made as the dispatcher makes it (sbl_audit_command: param
 * {command, ns}), by u@admin; whether the filter kept it. */
static bool kept_cmd(const char *cmd, const char *ns)
{
    sbl_err_t err;
    bson_t args = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&args, cmd, "c");
    sbl_audit_client_t c = {.local = "127.0.0.1:27017", .remote = "[::1]:5000", .user = "u",
                            .user_db = "admin"};
    uint64_t seq = 0;
    int rc = sbl_audit_command("authCheck", &c, cmd, ns, &args, 0, false, true, &seq, &err);
    bson_destroy(&args);
    return rc == 0 && seq != 0;
}

/* A filter over atype and param alone: the thread's last decision is
 * reused for the same atype, command and ns (tl_quick), never across a
 * different ns or command, and never after the filter changes. */
static void test_filter_quick(void)
{
    static const char *const find = "find", *const update = "update";
    char path[300];
    snprintf(path, sizeof(path), "%s/q.json", dir);
    sbl_err_t err;
    sbl_audit_config_t cfg = {.destination = SBL_AUDIT_FILE, .format = SBL_AUDIT_JSON,
                              .path = path};
    CHECK(sbl_audit_open(&cfg, &err) == 0);
    set_filter("{\"atype\": \"authCheck\", \"param.command\": \"find\", \"param.ns\": \"d.c\"}");
    for (int i = 0; i < 3; i++) {
        CHECK(kept_cmd(find, "d.c"));
        CHECK(kept_cmd(find, "d.c"));
        CHECK(!kept_cmd(find, "d.x"));
        CHECK(kept_cmd(find, "d.c"));
        CHECK(!kept_cmd(update, "d.c"));
    }
    set_filter("{\"atype\": \"authCheck\", \"param.command\": \"update\"}");
    CHECK(!kept_cmd(find, "d.c") && kept_cmd(update, "d.c") && kept_cmd(update, "d.c"));
    set_filter("{\"atype\": \"authCheck\", \"users.user\": \"v\"}"); /* names users: no reuse */
    CHECK(!kept_cmd(update, "d.c") && !kept_cmd(update, "d.c"));
    set_filter("{\"atype\": \"authCheck\"}");
    CHECK(kept_cmd(update, "d.c") && kept_cmd(update, "d.c"));
    sbl_audit_close();
}

/* The first line of path containing needle, into line (cap bytes). */
static bool find_line(const char *path, const char *needle, char *line, size_t cap)
{
    FILE *f = fopen(path, "r");
    bool found = false;
    while (f != NULL && !found && fgets(line, (int)cap, f) != NULL)
        found = strstr(line, needle) != NULL;
    if (f != NULL)
        fclose(f);
    return found;
}

/* sbl_audit_command (authCheck): param {command, ns, args} written from the
 * strings, the same bytes as a param document would give; a top-level pwd
 * recorded as "xxx" (in JSON, and in what a filter over param.args sees);
 * a command over 64 KiB as {"$truncated": <size>}. */
static void test_command_event(void)
{
    char path[300], line[8192];
    snprintf(path, sizeof(path), "%s/c.json", dir);
    sbl_err_t err;
    sbl_audit_config_t cfg = {.destination = SBL_AUDIT_FILE, .format = SBL_AUDIT_JSON,
                              .path = path};
    CHECK(sbl_audit_open(&cfg, &err) == 0);
    uint8_t uuid[16] = {5, 6};
    sbl_audit_client_t c = {.uuid = uuid, .local = "127.0.0.1:27017", .remote = "1.2.3.4:5"};
    bson_t args = BSON_INITIALIZER, sub, param = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&args, "find", "t\"1");
    BSON_APPEND_DOCUMENT_BEGIN(&args, "filter", &sub);
    BSON_APPEND_UTF8(&sub, "pwd", "nested-kept");
    bson_append_document_end(&args, &sub);
    BSON_APPEND_UTF8(&args, "$db", "d");
    BSON_APPEND_UTF8(&param, "command", "find");
    BSON_APPEND_UTF8(&param, "ns", "d.t\"1");
    uint64_t s1 = 0, s2 = 0, s3 = 0, s4 = 0;
    CHECK(sbl_audit_command("authCheck", &c, "find", "d.t\"1", &args, 0, false, false, &s1,
                            &err) == 0);
    CHECK(sbl_audit_event_args("authCheck", &c, &param, &args, 0, false, &s2, &err) == 0);

    bson_t cu = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&cu, "createUser", "u9");
    BSON_APPEND_UTF8(&cu, "pwd", "secret-9");
    BSON_APPEND_UTF8(&cu, "$db", "admin");
    CHECK(sbl_audit_command("authCheck", &c, "createUser", "admin.u9", &cu, 0, false, true, &s3,
                            &err) == 0);
    bson_t huge = BSON_INITIALIZER;
    char *big = malloc(70000);
    memset(big, 'x', 69999);
    big[69999] = '\0';
    BSON_APPEND_UTF8(&huge, "insert", "h");
    BSON_APPEND_UTF8(&huge, "blob", big);
    CHECK(sbl_audit_command("authCheck", &c, "insert", "d.h", &huge, 0, false, false, &s4,
                            &err) == 0);
    CHECK(sbl_audit_flush(s4, &err) == 0);

    /* Two sessions' lsids, alternating (their JSON is remembered per thread). */
    for (int i = 0; i < 6; i++) {
        bson_t cmd = BSON_INITIALIZER, lsid;
        uint8_t id[16];
        uint64_t sq = 0;
        memset(id, i % 2 ? 0x22 : 0x11, sizeof(id));
        BSON_APPEND_UTF8(&cmd, "find", "s");
        BSON_APPEND_DOCUMENT_BEGIN(&cmd, "lsid", &lsid);
        BSON_APPEND_BINARY(&lsid, "id", BSON_SUBTYPE_UUID, id, 16);
        bson_append_document_end(&cmd, &lsid);
        BSON_APPEND_UTF8(&cmd, "$db", "d");
        CHECK(sbl_audit_command("authCheck", &c, "find", "d.s", &cmd, 0, false, false, &sq,
                                &err) == 0 && sq != 0);
        bson_destroy(&cmd);
    }
    /* What a filter over param.args sees of the password. */
    set_filter("{\"param.args.pwd\": \"xxx\"}");
    uint64_t s5 = 0, s6 = 0;
    CHECK(sbl_audit_command("authCheck", &c, "createUser", "admin.u9", &cu, 0, false, false, &s5,
                            &err) == 0 && s5 != 0);
    set_filter("{\"param.args.pwd\": \"secret-9\"}");
    CHECK(sbl_audit_command("authCheck", &c, "createUser", "admin.u9", &cu, 0, false, false, &s6,
                            &err) == 0 && s6 == 0);
    sbl_audit_close();

    const char *want = "\"param\":{\"command\":\"find\",\"ns\":\"d.t\\\"1\",\"args\":{\"find\":"
                       "\"t\\\"1\",\"filter\":{\"pwd\":\"nested-kept\"},\"$db\":\"d\"}},"
                       "\"result\":0}\n";
    CHECK(count_lines(path, want) == 2); /* sbl_audit_command and the param document alike */
    CHECK(find_line(path, "\"command\":\"createUser\"", line, sizeof(line)));
    CHECK_MSG(strstr(line, "\"args\":{\"createUser\":\"u9\",\"pwd\":\"xxx\",\"$db\":\"admin\"}") !=
                  NULL, "%s", line);
    CHECK(count_lines(path, "secret-9") == 0);
    char trunc[64];
    snprintf(trunc, sizeof(trunc), "\"args\":{\"$truncated\":%u}}", huge.len);
    CHECK(count_lines(path, trunc) == 1);
    CHECK(count_lines(path, "xxxxxxxx") == 0);
    CHECK(count_lines(path, "\"atype\":\"authCheck\"") == 11);
    CHECK(count_lines(path, "\"args\":{\"find\":\"s\",\"lsid\":{\"id\":{\"$binary\":{\"base64\":"
                            "\"EREREREREREREREREREREQ==\",\"subType\":\"04\"}}},\"$db\":\"d\"}") == 3);
    CHECK(count_lines(path, "\"lsid\":{\"id\":{\"$binary\":{\"base64\":"
                            "\"IiIiIiIiIiIiIiIiIiIiIg==\",\"subType\":\"04\"}}}") == 3);
    free(big);
    bson_destroy(&args);
    bson_destroy(&param);
    bson_destroy(&cu);
    bson_destroy(&huge);
}

/* Random documents (keys and strings of every length up to a few words,
 * with bytes to escape anywhere in them, every common type, nesting): the
 * formatter's JSON parses back to what libbson's relaxed extended JSON of
 * the same document parses back to. */
static unsigned rnd_state = 12345;
static unsigned rnd(unsigned n)
{
    rnd_state = rnd_state * 1103515245u + 12345u;
    return (rnd_state >> 8) % n;
}

static void rnd_text(char *s, size_t n)
{
    static const char odd[] = "\"\\\n\t\x01\x1f\x7f/<>$. ";
    for (size_t i = 0; i < n; i++)
        s[i] = rnd(6) == 0 ? odd[rnd(sizeof(odd) - 1)] : (char)('a' + rnd(26));
    s[n] = '\0';
}

static void rnd_doc(bson_t *d, int depth, bool array)
{
    int n = (int)rnd(7);
    for (int i = 0; i < n; i++) {
        char key[64], str[80];
        uint8_t bin[40];
        bson_t sub;
        if (array)
            snprintf(key, sizeof(key), "%d", i);
        else
            rnd_text(key, rnd(4) == 0 ? 20 + rnd(40) : rnd(12));
        for (size_t j = 0; j < sizeof(bin); j++)
            bin[j] = (uint8_t)rnd(256);
        switch (rnd(10)) {
        case 0:
        case 1:
            rnd_text(str, rnd(4) == 0 ? rnd(79) : rnd(24));
            BSON_APPEND_UTF8(d, key, str);
            break;
        case 2: BSON_APPEND_INT32(d, key, (int32_t)rnd(1u << 30) - (1 << 29)); break;
        case 3: BSON_APPEND_INT64(d, key, (int64_t)rnd(1u << 30) * 1000003 - 7); break;
        case 4: BSON_APPEND_BOOL(d, key, rnd(2)); break;
        case 5: BSON_APPEND_NULL(d, key); break;
        case 6: BSON_APPEND_BINARY(d, key, BSON_SUBTYPE_BINARY, bin, rnd(40)); break;
        case 7: BSON_APPEND_DATE_TIME(d, key, (int64_t)rnd(1u << 30) * 1000 + rnd(1000)); break;
        default:
            if (depth < 3) {
                bool arr = rnd(3) == 0;
                if (arr)
                    BSON_APPEND_ARRAY_BEGIN(d, key, &sub);
                else
                    BSON_APPEND_DOCUMENT_BEGIN(d, key, &sub);
                rnd_doc(&sub, depth + 1, arr);
                if (arr)
                    bson_append_array_end(d, &sub);
                else
                    bson_append_document_end(d, &sub);
            }
        }
    }
}

static void test_json_random(void)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/r.json", dir);
    sbl_err_t err;
    sbl_audit_config_t cfg = {.destination = SBL_AUDIT_FILE, .format = SBL_AUDIT_JSON,
                              .path = path};
    CHECK(sbl_audit_open(&cfg, &err) == 0);
    enum { N = 300 };
    bson_t docs[N];
    uint64_t seq = 0;
    for (int i = 0; i < N; i++) {
        bson_init(&docs[i]);
        rnd_doc(&docs[i], 0, false);
        CHECK(sbl_audit_event_args("m", NULL, NULL, &docs[i], 0, false, &seq, &err) == 0);
    }
    CHECK(sbl_audit_flush(seq, &err) == 0);
    sbl_audit_close();
    FILE *f = fopen(path, "r");
    static char line[65536];
    int i = 0, bad = 0;
    while (f != NULL && i < N && fgets(line, sizeof(line), f) != NULL) {
        bson_error_t je;
        bson_iter_t it;
        bson_t *ev = bson_new_from_json((const uint8_t *)line, -1, &je);
        char *lj = bson_as_relaxed_extended_json(&docs[i], NULL);
        bson_t *want = bson_new_from_json((const uint8_t *)lj, -1, &je);
        bool same = false;
        if (ev != NULL && want != NULL && bson_iter_init_find(&it, ev, "param") &&
            BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &it) &&
            bson_iter_find(&it, "args") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            uint32_t len;
            const uint8_t *data;
            bson_t got;
            bson_iter_document(&it, &len, &data);
            bson_init_static(&got, data, len);
            char *gj = bson_as_canonical_extended_json(&got, NULL);
            char *wj = bson_as_canonical_extended_json(want, NULL);
            same = strcmp(gj, wj) == 0;
            if (!same && bad == 0)
                fprintf(stderr, "got  %s\nwant %s\n", gj, wj);
            bson_free(gj);
            bson_free(wj);
        }
        bad += !same;
        bson_free(lj);
        if (ev != NULL)
            bson_destroy(ev);
        if (want != NULL)
            bson_destroy(want);
        i++;
    }
    if (f != NULL)
        fclose(f);
    CHECK_MSG(i == N && bad == 0, "%d lines, %d differ", i, bad);
    for (int j = 0; j < N; j++)
        bson_destroy(&docs[j]);
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
    sbl_err_t ferr = {0};
    CHECK(sbl_audit_flush(seq, &ferr) == 14031); /* the caller learns of the failure */
    CHECK(strstr(ferr.msg, "audit log write failed") != NULL);
    CHECK(sbl_audit_health(&err) == 14031);
    CHECK(strstr(err.msg, "audit log write failed") != NULL);
    CHECK(emit_msg("refused", 0, &seq) == 14031 && seq == 0);
    CHECK(sbl_audit_flush(1, &ferr) == 14031 && !sbl_audit_written(1));
    sbl_audit_close();
    CHECK(!sbl_audit_enabled());
}

/* The formatter gives what libbson's relaxed extended JSON gives, value for value. */
static void test_json_types(void)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/t.json", dir);
    sbl_err_t err;
    sbl_audit_config_t cfg = {.destination = SBL_AUDIT_FILE, .format = SBL_AUDIT_JSON,
                              .path = path};
    CHECK(sbl_audit_open(&cfg, &err) == 0);
    bson_t args = BSON_INITIALIZER, sub, arr;
    bson_oid_t oid;
    bson_decimal128_t dec;
    uint8_t bin[5] = {0, 1, 2, 0xfe, 0xff};
    bson_oid_init_from_string(&oid, "5f1e2d3c4b5a697887960a1b");
    bson_decimal128_from_string("1.25E+3", &dec);
    BSON_APPEND_UTF8(&args, "insert", "c\"q\\b\n\t\x01\x1f é");
    BSON_APPEND_DOUBLE(&args, "d", 1.0);
    BSON_APPEND_DOUBLE(&args, "d2", -0.1);
    BSON_APPEND_DOUBLE(&args, "d3", 1e300);
    BSON_APPEND_INT32(&args, "i", -7);
    BSON_APPEND_INT64(&args, "l", 1234567890123LL);
    BSON_APPEND_BOOL(&args, "t", true);
    BSON_APPEND_NULL(&args, "n");
    BSON_APPEND_OID(&args, "o", &oid);
    BSON_APPEND_DATE_TIME(&args, "dt", 1700000000123LL);
    BSON_APPEND_DATE_TIME(&args, "old", -5000);
    BSON_APPEND_BINARY(&args, "b", BSON_SUBTYPE_BINARY, bin, 5);
    BSON_APPEND_BINARY(&args, "b1", BSON_SUBTYPE_BINARY, bin, 4);
    BSON_APPEND_REGEX(&args, "re", "^a\\.b", "i");
    BSON_APPEND_TIMESTAMP(&args, "ts", 5, 6);
    BSON_APPEND_DECIMAL128(&args, "dec", &dec);
    BSON_APPEND_MINKEY(&args, "min");
    BSON_APPEND_MAXKEY(&args, "max");
    BSON_APPEND_CODE(&args, "code", "f()");
    BSON_APPEND_DOCUMENT_BEGIN(&args, "sub", &sub);
    BSON_APPEND_ARRAY_BEGIN(&sub, "a", &arr);
    BSON_APPEND_INT32(&arr, "0", 1);
    BSON_APPEND_UTF8(&arr, "1", "x");
    bson_append_array_end(&sub, &arr);
    bson_append_document_end(&args, &sub);
    bson_t param = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&param, "command", "insert");
    uint64_t seq = 0;
    CHECK(sbl_audit_event_args("authCheck", NULL, &param, &args, 0, false, &seq, &err) == 0);
    CHECK(sbl_audit_flush(seq, &err) == 0);
    sbl_audit_close();

    char line[8192] = "";
    FILE *f = fopen(path, "r");
    CHECK(f != NULL && fgets(line, sizeof(line), f) != NULL);
    if (f != NULL)
        fclose(f);
    bson_error_t je;
    bson_t *ev = bson_new_from_json((const uint8_t *)line, -1, &je);
    CHECK_MSG(ev != NULL, "%s: %s", je.message, line);
    bson_iter_t it;
    bson_t got, want_param = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&want_param, "command", "insert");
    BSON_APPEND_DOCUMENT(&want_param, "args", &args);
    /* What libbson's relaxed JSON of the same param parses back to. */
    char *lj = bson_as_relaxed_extended_json(&want_param, NULL);
    bson_t *want = bson_new_from_json((const uint8_t *)lj, -1, &je);
    CHECK(want != NULL);
    if (ev != NULL && want != NULL && bson_iter_init_find(&it, ev, "param") &&
        BSON_ITER_HOLDS_DOCUMENT(&it)) {
        uint32_t len;
        const uint8_t *data;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&got, data, len);
        char *gj = bson_as_canonical_extended_json(&got, NULL);
        char *wj = bson_as_canonical_extended_json(want, NULL);
        CHECK_MSG(strcmp(gj, wj) == 0, "\n got %s\nwant %s", gj, wj);
        bson_free(gj);
        bson_free(wj);
    } else {
        CHECK(false);
    }
    CHECK(ev != NULL && bson_iter_init_find(&it, ev, "result") && bson_iter_as_int64(&it) == 0);
    bson_free(lj);
    if (want != NULL)
        bson_destroy(want);
    if (ev != NULL)
        bson_destroy(ev);
    bson_destroy(&want_param);
    bson_destroy(&param);
    bson_destroy(&args);
}

/* authCheck events whose atype, command and ns repeat and change (their
 * JSON around ts and the client is remembered per thread for the last
 * triple): each line names its own, byte for byte as the line an event
 * with the same param document gives (the path without the memo). */
static void test_command_head(void)
{
    static const char *const cmds[] = {"find", "insert", "find", "find", "update", "find"};
    static const char *const nss[] = {"d.a", "d.a", "d.ab", "d.a\"b", "d.a", "d.a"};
    static const char *const atypes[] = {"authCheck", "authCheckX"};
    char path[300], line[4096], ref[4096];
    snprintf(path, sizeof(path), "%s/h.json", dir);
    sbl_err_t err;
    sbl_audit_config_t cfg = {.destination = SBL_AUDIT_FILE, .format = SBL_AUDIT_JSON,
                              .path = path};
    CHECK(sbl_audit_open(&cfg, &err) == 0);
    sbl_audit_client_t c = {.local = "127.0.0.1:27017", .remote = "1.2.3.4:5", .user = "u"};
    bson_t args = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&args, "ping", "x");
    uint64_t seq = 0;
    enum { N = 60 };
    for (int i = 0; i < N; i++) {
        int k = (i * 7 / 3) % 6;
        const char *at = atypes[i % 8 == 3];
        bson_t param = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&param, "command", cmds[k]);
        BSON_APPEND_UTF8(&param, "ns", nss[k]);
        CHECK(sbl_audit_command(at, &c, cmds[k], nss[k], &args, 0, false, true, &seq, &err) == 0);
        CHECK(sbl_audit_event_args(at, &c, &param, &args, 0, false, &seq, &err) == 0);
        bson_destroy(&param);
    }
    CHECK(sbl_audit_flush(seq, &err) == 0);
    sbl_audit_close();
    bson_destroy(&args);
    FILE *f = fopen(path, "r");
    int lines = 0, bad = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL && fgets(ref, sizeof(ref), f) != NULL) {
        /* the same but for ts: {"atype":..,"ts":{"$date":"...Z"},... */
        char *t1 = strstr(line, "Z\"}"), *t2 = strstr(ref, "Z\"}");
        if (t1 == NULL || t2 == NULL || strcmp(t1, t2) != 0 ||
            strncmp(line, ref, (size_t)(strstr(line, "\"ts\"") - line)) != 0) {
            if (bad++ == 0)
                fprintf(stderr, "got  %swant %s", line, ref);
        }
        int k = (lines * 7 / 3) % 6;
        char want[200];
        snprintf(want, sizeof(want), "\"param\":{\"command\":\"%s\",\"ns\":\"%s\",", cmds[k],
                 k == 3 ? "d.a\\\"b" : nss[k]);
        if (strstr(line, want) == NULL && bad++ == 0)
            fprintf(stderr, "line %d lacks %s: %s", lines, want, line);
        lines++;
    }
    if (f != NULL)
        fclose(f);
    CHECK_MSG(lines == N && bad == 0, "%d pairs, %d differ", lines, bad);
}

/* ---- lanes: the events a network loop makes itself ---------------------------- */

/* Open a JSON audit log at dir/name (its path into path, 300 bytes). */
static void open_json(char *path, const char *name)
{
    sbl_err_t err;
    snprintf(path, 300, "%s/%s", dir, name);
    sbl_audit_config_t cfg = {.destination = SBL_AUDIT_FILE, .format = SBL_AUDIT_JSON,
                              .path = path};
    CHECK(sbl_audit_open(&cfg, &err) == 0);
}

/* An authCheck made as a network loop makes it (self: into the thread's
 * lane), its ns "t<thread>.c<i>". */
static int lane_event(int t, int i, uint64_t *seq)
{
    sbl_err_t err;
    char ns[64];
    bson_t args = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&args, "insert", "c");
    snprintf(ns, sizeof(ns), "t%d.c%d", t, i);
    sbl_audit_client_t c = {.local = "127.0.0.1:27017", .remote = "[::1]:5000"};
    int rc = sbl_audit_command("authCheck", &c, "insert", ns, &args, 0, false, true, seq, &err);
    bson_destroy(&args);
    return rc;
}

#define LANE_THREADS 4
#define LANE_EVENTS 1503 /* the last three are written by close */
static atomic_int lane_bad;

/* A loop's life: events into its lane, written by its own flush every ten. */
static void *lane_thread(void *arg)
{
    int t = (int)(intptr_t)arg;
    uint64_t seq = 0;
    sbl_err_t err;
    for (int i = 0; i < LANE_EVENTS; i++) {
        if (lane_event(t, i, &seq) != 0 || (seq >> 63) == 0)
            atomic_fetch_add(&lane_bad, 1);
        if (i % 10 == 9 && (sbl_audit_flush(seq, &err) != 0 || !sbl_audit_written(seq)))
            atomic_fetch_add(&lane_bad, 1);
    }
    return NULL;
}

/* The lines of the rotated files (oldest first) and then of path: for each
 * "t<k>.c<i>" ns, check that i runs 0, 1, 2 ... per k; returns the count. */
static int lane_check_files(const char *path, int *next, int nthreads)
{
    char cmd[600], name[4096], line[8192];
    int total = 0, bad = 0;
    snprintf(cmd, sizeof(cmd), "ls %s.* 2>/dev/null | sort; echo %s", path, path);
    FILE *ls = popen(cmd, "r");
    while (ls != NULL && fgets(name, sizeof(name), ls) != NULL) {
        name[strcspn(name, "\n")] = '\0';
        FILE *f = fopen(name, "r");
        while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
            char *ns = strstr(line, "\"ns\":\"t");
            int k, i;
            if (ns == NULL || sscanf(ns, "\"ns\":\"t%d.c%d\"", &k, &i) != 2)
                continue;
            total++;
            if (k < 0 || k >= nthreads || i != next[k]) {
                if (bad++ == 0)
                    fprintf(stderr, "%s: t%d.c%d out of order\n", name, k, i);
            } else {
                next[k]++;
            }
        }
        if (f != NULL)
            fclose(f);
    }
    if (ls != NULL)
        pclose(ls);
    return bad == 0 ? total : -1;
}

/* Four loops writing their lanes while the file is rotated: every event
 * once, each thread's in order, each flush's events written when it returns. */
static void test_lanes_rotation(void)
{
    char path[300];
    sbl_err_t err;
    open_json(path, "lanes.json");
    pthread_t t[LANE_THREADS];
    for (int i = 0; i < LANE_THREADS; i++)
        pthread_create(&t[i], NULL, lane_thread, (void *)(intptr_t)i);
    for (int r = 0; r < 5; r++) {
        usleep(3000);
        CHECK(sbl_audit_rotate(&err) == 0);
    }
    for (int i = 0; i < LANE_THREADS; i++)
        pthread_join(t[i], NULL);
    sbl_audit_close(); /* writes what the lanes hold after their last flush */
    CHECK(atomic_load(&lane_bad) == 0);
    int next[LANE_THREADS] = {0};
    int total = lane_check_files(path, next, LANE_THREADS);
    CHECK_MSG(total == LANE_THREADS * LANE_EVENTS, "%d events", total);
}

static uint64_t shared_seq;

static void *shared_thread(void *arg)
{
    emit_msg("other", 0, &shared_seq);
    while (!sbl_audit_written(shared_seq)) /* the writer thread's */
        usleep(1000);
    return arg;
}

/* A loop's events, then (sealed) an event another thread makes for the same
 * connection, as a command run on a worker does: the loop's come first,
 * written by the writer thread with the other one (no flush of the loop's).
 * Then a lane event followed by a shared one on the same thread. */
static void test_lane_seal(void)
{
    char path[300];
    sbl_err_t err;
    open_json(path, "seal.json");
    uint64_t seq = 0;
    for (int i = 0; i < 3; i++)
        CHECK(lane_event(0, i, &seq) == 0);
    CHECK(!sbl_audit_written(seq));
    sbl_audit_seal();
    pthread_t t;
    pthread_create(&t, NULL, shared_thread, NULL);
    pthread_join(t, NULL);
    CHECK(sbl_audit_written(seq)); /* moved, and written with the other event */
    CHECK(lane_event(0, 3, &seq) == 0);
    uint64_t s2 = 0;
    CHECK(emit_msg("after", 0, &s2) == 0); /* the lane's event goes first */
    CHECK(sbl_audit_flush(seq, &err) == 0 && sbl_audit_written(s2));
    sbl_audit_close();
    FILE *f = fopen(path, "r");
    char line[8192];
    char order[16] = "";
    while (f != NULL && fgets(line, sizeof(line), f) != NULL && strlen(order) < 10)
        strcat(order, strstr(line, "\"atype\":\"other\"") ? "o"
                      : strstr(line, "\"atype\":\"after\"") ? "a"
                                                            : "L");
    if (f != NULL)
        fclose(f);
    CHECK_MSG(strcmp(order, "LLLoLa") == 0, "order %s", order);
}

/* A lane that cannot be written (the file size limit) refuses, moves its
 * events to the writer thread, which writes them once the file can be
 * written again: exactly once, in order, before the lane's next ones. */
static void test_lane_failure(void)
{
    char path[300];
    sbl_err_t err;
    open_json(path, "fail.json");
    uint64_t seq = 0;
    CHECK(lane_event(1, 0, &seq) == 0 && sbl_audit_flush(seq, &err) == 0);
    struct stat st;
    struct rlimit old, lim;
    CHECK(stat(path, &st) == 0 && getrlimit(RLIMIT_FSIZE, &old) == 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = (rlim_t)st.st_size; /* no byte more */
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    CHECK(lane_event(1, 1, &seq) == 0);
    sbl_err_t ferr = {0};
    CHECK(sbl_audit_flush(seq, &ferr) != 0 && !sbl_audit_written(seq));
    CHECK(strstr(ferr.msg, "audit log write failed") != NULL);
    uint64_t refused = 0;
    CHECK(lane_event(1, 99, &refused) != 0 && refused == 0); /* refused while failing */
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    int ms = 0; /* (the writer marks the events written a moment before the health) */
    while ((!sbl_audit_written(seq) || sbl_audit_health(&err) != 0) && ms++ < 3000)
        usleep(1000);
    CHECK_MSG(sbl_audit_written(seq), "not written %d ms after the file works", ms);
    CHECK(sbl_audit_health(&err) == 0);
    CHECK(lane_event(1, 2, &seq) == 0 && sbl_audit_flush(seq, &err) == 0);
    sbl_audit_close();
    signal(SIGXFSZ, prev);
    int next[2] = {0, 0};
    int total = lane_check_files(path, next, 2);
    CHECK_MSG(total == 3 && next[1] == 3, "%d events, next %d", total, next[1]);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/sbl-test-audit-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return 1;
    test_json_rotation();
    test_writer_takes_every_event();
    test_json_types();
    test_filter_bson();
    test_filter_fields();
    test_filter_quick();
    test_command_event();
    test_command_head();
    test_json_random();
    test_unwritable();
    test_lanes_rotation();
    test_lane_seal();
    test_lane_failure();
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return CHECK_DONE("test_audit");
}
