/*
 * test_mongoc.c: libmongoc against a real sabled.  Starts its own sabled
 * ($SABLED, default build/sabled) on a free 127.0.0.1 port with a temporary
 * dbpath, then connects through mongoc_client_t and checks hello, insert,
 * find, update and delete.  Always stops the server and removes the
 * directory; exits non-zero when any check failed, after a closing line
 * "test_mongoc: N passed, M failed".
 */
#include <ftw.h>
#include <mongoc/mongoc.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static int passed, failed;

#define CHECK(cond, ...)                                                 \
    do {                                                                 \
        if (cond) {                                                      \
            passed++;                                                    \
        } else {                                                         \
            failed++;                                                    \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                \
            fputc('\n', stderr);                                         \
        }                                                                \
    } while (0)

static pid_t server_pid = -1;
static char root[256];

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int port = -1;

    if (fd < 0)
        return -1;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void cleanup(void)
{
    if (server_pid > 0) {
        int status;
        kill(server_pid, SIGTERM);
        for (int i = 0; i < 300; i++) {
            if (waitpid(server_pid, &status, WNOHANG) == server_pid) {
                server_pid = -1;
                break;
            }
            usleep(100000);
        }
        if (server_pid > 0) {
            kill(server_pid, SIGKILL);
            waitpid(server_pid, &status, 0);
            server_pid = -1;
        }
    }
    if (root[0])
        nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void on_signal(int sig)
{
    (void)sig;
    cleanup();
    _exit(2);
}

static int start_server(int port)
{
    const char *bin = getenv("SABLED");
    char dbpath[300], logpath[300], portstr[16];
    char *argv[12];
    int ac = 0;

    if (!bin || !*bin)
        bin = "build/sabled";
    snprintf(root, sizeof root, "%s/sabled-mongoc-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(root)) {
        root[0] = '\0';
        perror("mkdtemp");
        return -1;
    }
    snprintf(dbpath, sizeof dbpath, "%s/db", root);
    snprintf(logpath, sizeof logpath, "%s/sabled.log", root);
    snprintf(portstr, sizeof portstr, "%d", port);
    if (mkdir(dbpath, 0700) != 0) {
        perror("mkdir");
        return -1;
    }
    argv[ac++] = (char *)bin;
    argv[ac++] = "--port";
    argv[ac++] = portstr;
    argv[ac++] = "--bind_ip";
    argv[ac++] = "127.0.0.1";
    argv[ac++] = "--dbpath";
    argv[ac++] = dbpath;
    argv[ac++] = "--logpath";
    argv[ac++] = logpath;
    argv[ac] = NULL;
    int rc = posix_spawn(&server_pid, bin, NULL, NULL, argv, environ);
    if (rc != 0) {
        fprintf(stderr, "cannot start %s: %s\n", bin, strerror(rc));
        server_pid = -1;
        return -1;
    }
    return 0;
}

/* Poll with ping until the server answers (or 30 s pass). */
static bool wait_ready(mongoc_client_t *client)
{
    bson_t *ping = BCON_NEW("ping", BCON_INT32(1));
    bson_error_t error;
    bool ok = false;

    for (int i = 0; i < 300 && !ok; i++) {
        int status;
        if (waitpid(server_pid, &status, WNOHANG) == server_pid) {
            server_pid = -1;
            fprintf(stderr, "sabled exited before answering\n");
            break;
        }
        ok = mongoc_client_command_simple(client, "admin", ping, NULL, NULL, &error);
        if (!ok)
            usleep(100000);
    }
    bson_destroy(ping);
    return ok;
}

static int64_t count(mongoc_collection_t *coll, const bson_t *filter)
{
    bson_error_t error;
    int64_t n = mongoc_collection_count_documents(coll, filter, NULL, NULL, NULL, &error);
    if (n < 0)
        fprintf(stderr, "count: %s\n", error.message);
    return n;
}

static void test_hello(mongoc_client_t *client)
{
    bson_t *cmd = BCON_NEW("hello", BCON_INT32(1));
    bson_t reply;
    bson_error_t error;
    bson_iter_t it;
    bool ok = mongoc_client_command_simple(client, "admin", cmd, NULL, &reply, &error);

    CHECK(ok, "hello: %s", error.message);
    if (ok) {
        CHECK(bson_iter_init_find(&it, &reply, "isWritablePrimary") && bson_iter_as_bool(&it),
              "isWritablePrimary");
        CHECK(bson_iter_init_find(&it, &reply, "maxWireVersion") && bson_iter_as_int64(&it) == 21,
              "maxWireVersion");
        CHECK(bson_iter_init_find(&it, &reply, "maxBsonObjectSize") &&
                  bson_iter_as_int64(&it) == 16777216,
              "maxBsonObjectSize");
    }
    bson_destroy(&reply);
    bson_destroy(cmd);

    /* the driver's own view of the server */
    mongoc_server_description_t *sd;
    bson_error_t e2;
    sd = mongoc_client_select_server(client, true, NULL, &e2);
    CHECK(sd != NULL, "select_server: %s", e2.message);
    if (sd) {
        CHECK(strcmp(mongoc_server_description_type(sd), "Standalone") == 0, "type %s",
              mongoc_server_description_type(sd));
        mongoc_server_description_destroy(sd);
    }
}

static void test_crud(mongoc_client_t *client)
{
    mongoc_collection_t *coll = mongoc_client_get_collection(client, "mongoc_it", "t");
    bson_error_t error;
    bson_t reply;
    bool ok;

    mongoc_collection_drop(coll, NULL);

    /* insert */
    bson_t *doc = BCON_NEW("_id", BCON_INT32(1), "name", BCON_UTF8("one"), "n", BCON_INT32(10));
    ok = mongoc_collection_insert_one(coll, doc, NULL, &reply, &error);
    CHECK(ok, "insert_one: %s", error.message);
    bson_destroy(&reply);
    bson_destroy(doc);

    bson_t *docs[50];
    for (int i = 0; i < 50; i++)
        docs[i] = BCON_NEW("_id", BCON_INT32(100 + i), "n", BCON_INT32(i));
    ok = mongoc_collection_insert_many(coll, (const bson_t **)docs, 50, NULL, &reply, &error);
    CHECK(ok, "insert_many: %s", error.message);
    bson_destroy(&reply);
    for (int i = 0; i < 50; i++)
        bson_destroy(docs[i]);

    bson_t empty = BSON_INITIALIZER;
    CHECK(count(coll, &empty) == 51, "count after insert");

    /* duplicate key */
    doc = BCON_NEW("_id", BCON_INT32(1));
    ok = mongoc_collection_insert_one(coll, doc, NULL, &reply, &error);
    CHECK(!ok && error.code == 11000, "duplicate insert: ok=%d code=%u", ok, error.code);
    bson_destroy(&reply);
    bson_destroy(doc);

    /* find with filter, sort, limit, small batches */
    bson_t *filter = BCON_NEW("n", "{", "$gte", BCON_INT32(40), "}");
    bson_t *opts = BCON_NEW("sort", "{", "_id", BCON_INT32(-1), "}", "batchSize", BCON_INT32(3),
                            "projection", "{", "n", BCON_INT32(1), "_id", BCON_INT32(1), "}");
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, filter, opts, NULL);
    const bson_t *d;
    int seen = 0, expect_id = 149, order_ok = 1;
    bson_iter_t it;
    while (mongoc_cursor_next(cur, &d)) {
        if (!bson_iter_init_find(&it, d, "_id") || bson_iter_as_int64(&it) != expect_id)
            order_ok = 0;
        expect_id--;
        seen++;
    }
    CHECK(!mongoc_cursor_error(cur, &error), "cursor: %s", error.message);
    /* n >= 40: the 10 docs 140..149 plus _id 1 (n = 10 does not match) */
    CHECK(seen == 10, "find returned %d", seen);
    CHECK(order_ok, "sort order");
    mongoc_cursor_destroy(cur);
    bson_destroy(filter);
    bson_destroy(opts);

    /* find one by _id */
    filter = BCON_NEW("_id", BCON_INT32(1));
    cur = mongoc_collection_find_with_opts(coll, filter, NULL, NULL);
    ok = mongoc_cursor_next(cur, &d);
    CHECK(ok, "find _id 1");
    if (ok) {
        CHECK(bson_iter_init_find(&it, d, "name") && BSON_ITER_HOLDS_UTF8(&it) &&
                  strcmp(bson_iter_utf8(&it, NULL), "one") == 0,
              "name field");
    }
    mongoc_cursor_destroy(cur);

    /* update */
    bson_t *update = BCON_NEW("$inc", "{", "n", BCON_INT32(5), "}", "$set", "{", "tag",
                              BCON_UTF8("x"), "}");
    ok = mongoc_collection_update_one(coll, filter, update, NULL, &reply, &error);
    CHECK(ok, "update_one: %s", error.message);
    CHECK(bson_iter_init_find(&it, &reply, "modifiedCount") && bson_iter_as_int64(&it) == 1,
          "modifiedCount");
    bson_destroy(&reply);
    bson_destroy(update);
    bson_t *q = BCON_NEW("_id", BCON_INT32(1), "n", BCON_INT32(15), "tag", BCON_UTF8("x"));
    CHECK(count(coll, q) == 1, "update applied");
    bson_destroy(q);

    update = BCON_NEW("$set", "{", "big", BCON_BOOL(true), "}");
    q = BCON_NEW("n", "{", "$lt", BCON_INT32(10), "}");
    ok = mongoc_collection_update_many(coll, q, update, NULL, &reply, &error);
    CHECK(ok, "update_many: %s", error.message);
    CHECK(bson_iter_init_find(&it, &reply, "matchedCount") && bson_iter_as_int64(&it) == 10,
          "matchedCount");
    bson_destroy(&reply);
    bson_destroy(update);
    bson_destroy(q);

    /* upsert */
    bson_t *uf = BCON_NEW("_id", BCON_UTF8("up"));
    update = BCON_NEW("$set", "{", "v", BCON_INT32(1), "}");
    bson_t *uopts = BCON_NEW("upsert", BCON_BOOL(true));
    ok = mongoc_collection_update_one(coll, uf, update, uopts, &reply, &error);
    CHECK(ok, "upsert: %s", error.message);
    CHECK(bson_iter_init_find(&it, &reply, "upsertedId") && BSON_ITER_HOLDS_UTF8(&it),
          "upsertedId");
    bson_destroy(&reply);
    bson_destroy(uf);
    bson_destroy(update);
    bson_destroy(uopts);

    /* delete */
    ok = mongoc_collection_delete_one(coll, filter, NULL, &reply, &error);
    CHECK(ok, "delete_one: %s", error.message);
    CHECK(bson_iter_init_find(&it, &reply, "deletedCount") && bson_iter_as_int64(&it) == 1,
          "deletedCount");
    bson_destroy(&reply);
    q = BCON_NEW("_id", "{", "$gte", BCON_INT32(100), "}");
    ok = mongoc_collection_delete_many(coll, q, NULL, &reply, &error);
    CHECK(ok, "delete_many: %s", error.message);
    CHECK(bson_iter_init_find(&it, &reply, "deletedCount") && bson_iter_as_int64(&it) == 50,
          "deletedCount many");
    bson_destroy(&reply);
    bson_destroy(q);
    CHECK(count(coll, &empty) == 1, "count after deletes");
    bson_destroy(filter);

    ok = mongoc_collection_drop(coll, &error);
    CHECK(ok, "drop: %s", error.message);
    mongoc_collection_destroy(coll);
}

int main(void)
{
    int port = free_port();
    char uri_str[128];
    mongoc_client_t *client = NULL;

    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    mongoc_init();
    if (port < 0 || start_server(port) != 0) {
        cleanup();
        fprintf(stderr, "test_mongoc: could not start sabled\n");
        printf("test_mongoc: 0 passed, 1 failed\n");
        return 1;
    }
    snprintf(uri_str, sizeof uri_str,
             "mongodb://127.0.0.1:%d/?serverSelectionTimeoutMS=1000&connectTimeoutMS=1000", port);
    client = mongoc_client_new(uri_str);
    CHECK(client != NULL, "mongoc_client_new");
    if (client)
        mongoc_client_set_error_api(client, MONGOC_ERROR_API_VERSION_2);
    if (client && wait_ready(client)) {
        passed++;
        test_hello(client);
        test_crud(client);
    } else {
        failed++;
        fprintf(stderr, "sabled did not answer ping\n");
    }
    if (client)
        mongoc_client_destroy(client);
    mongoc_cleanup();
    cleanup();
    printf("test_mongoc: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
