/*
 * test_mongoc_auth.c: libmongoc authenticating and speaking TLS to a real
 * sabled.  Starts its own servers ($SABLED, default build/sabled) one after
 * another on free 127.0.0.1 ports under one temporary directory:
 *   1. --auth: first user over the localhost exception, then SCRAM-SHA-1,
 *      SCRAM-SHA-256 and the negotiated mechanism with insert + find; a
 *      wrong proof is 18 (libmongoc reports its own CLIENT/AUTHENTICATE
 *      code with the server's message), an unauthenticated find is 13.
 *   2. --tlsMode requireTLS: CRUD with tls=true&tlsCAFile, plaintext refused.
 *   3. requireTLS + --auth: the first user created over TLS, then TLS and
 *      SCRAM-SHA-256 in one connection.
 * The CA and server certificate are made with the openssl CLI.  Servers are
 * always stopped and the directory removed; the closing line is
 * "test_mongoc_auth: N passed, M failed" and the exit status is non-zero
 * when any check failed.
 */
#include <errno.h>
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

#define ROOT_USER "admin"
#define ROOT_PWD "s3cret-Pw"
/* Fail fast: a refused connection must not hold a check for long. */
#define URI_OPTS "serverSelectionTimeoutMS=3000&connectTimeoutMS=3000"

/* The one running server (they run one at a time) and the shared temp dir. */
static pid_t server_pid = -1;
static int server_port;
static char root[256];
static char ca_path[320];
static char server_pem[320];

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

static void stop_server(void)
{
    int status;

    if (server_pid <= 0)
        return;
    kill(server_pid, SIGTERM);
    for (int i = 0; i < 300; i++) {
        if (waitpid(server_pid, &status, WNOHANG) == server_pid) {
            server_pid = -1;
            return;
        }
        usleep(100000);
    }
    kill(server_pid, SIGKILL);
    waitpid(server_pid, &status, 0);
    server_pid = -1;
}

static void cleanup(void)
{
    stop_server();
    if (root[0])
        nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void on_signal(int sig)
{
    (void)sig;
    cleanup();
    _exit(2);
}

/* Wait until the server accepts TCP connections (or exits, or 30 s pass).
 * A TCP probe works for plaintext and requireTLS alike, and keeps the
 * driver's own failure cooldown out of the start-up. */
static bool wait_port(void)
{
    struct sockaddr_in a;

    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)server_port);
    for (int i = 0; i < 300; i++) {
        int status, fd, rc;

        if (waitpid(server_pid, &status, WNOHANG) == server_pid) {
            server_pid = -1;
            fprintf(stderr, "sabled exited before listening\n");
            return false;
        }
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0)
            return false;
        rc = connect(fd, (struct sockaddr *)&a, sizeof a);
        close(fd);
        if (rc == 0)
            return true;
        usleep(100000);
    }
    fprintf(stderr, "sabled did not listen on %d\n", server_port);
    return false;
}

/* Start sabled on a fresh port with dbpath root/<name> and the given extra
 * arguments (NULL-terminated); waits until it listens. */
static bool start_server(const char *name, const char *const *extra)
{
    const char *bin = getenv("SABLED");
    char dbpath[320], logpath[320], portstr[16];
    char *argv[32];
    int ac = 0, rc;

    if (!bin || !*bin)
        bin = "build/sabled";
    server_port = free_port();
    if (server_port < 0)
        return false;
    snprintf(dbpath, sizeof dbpath, "%s/%s", root, name);
    snprintf(logpath, sizeof logpath, "%s/%s.log", root, name);
    snprintf(portstr, sizeof portstr, "%d", server_port);
    if (mkdir(dbpath, 0700) != 0) {
        perror("mkdir");
        return false;
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
    for (int i = 0; extra && extra[i] && ac < 31; i++)
        argv[ac++] = (char *)extra[i];
    argv[ac] = NULL;
    rc = posix_spawn(&server_pid, bin, NULL, NULL, argv, environ);
    if (rc != 0) {
        fprintf(stderr, "cannot start %s: %s\n", bin, strerror(rc));
        server_pid = -1;
        return false;
    }
    return wait_port();
}

/* Run one shell command in root/certs, quietly; true when it exits 0. */
static bool sh(const char *cmd)
{
    char line[1024];
    int rc;

    snprintf(line, sizeof line, "cd '%s/certs' && ( %s ) >/dev/null 2>&1", root, cmd);
    rc = system(line);
    if (rc != 0)
        fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
    return rc == 0;
}

/* A CA and a server certificate for 127.0.0.1 / localhost signed by it. */
static bool make_certs(void)
{
    char dir[300];

    snprintf(dir, sizeof dir, "%s/certs", root);
    if (mkdir(dir, 0700) != 0) {
        perror("mkdir certs");
        return false;
    }
    snprintf(ca_path, sizeof ca_path, "%s/ca.pem", dir);
    snprintf(server_pem, sizeof server_pem, "%s/server.pem", dir);
    return sh("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -keyout ca.key -out ca.pem"
              " -subj '/CN=Sable Test CA'") &&
           sh("openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr"
              " -subj '/CN=127.0.0.1'") &&
           sh("echo 'subjectAltName=IP:127.0.0.1,DNS:localhost' > san.ext") &&
           sh("openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial"
              " -days 2 -out server.crt -extfile san.ext") &&
           sh("cat server.crt server.key > server.pem");
}

/* A single-threaded client for "mongodb://<creds>127.0.0.1:<port>/<rest>";
 * NULL (and a failed check) when the URI is refused. */
static mongoc_client_t *client_for(const char *creds, const char *rest)
{
    char uri[1024];
    mongoc_client_t *c;

    snprintf(uri, sizeof uri, "mongodb://%s127.0.0.1:%d/%s%s" URI_OPTS, creds, server_port,
             rest, strchr(rest, '?') ? "&" : "?");
    c = mongoc_client_new(uri);
    CHECK(c != NULL, "mongoc_client_new(%s)", uri);
    if (c)
        mongoc_client_set_error_api(c, MONGOC_ERROR_API_VERSION_2);
    return c;
}

/* Run {name: 1} on db; returns ok and fills error. */
static bool run_simple(mongoc_client_t *c, const char *db, const char *name, bson_error_t *error)
{
    bson_t *cmd = BCON_NEW(name, BCON_INT32(1));
    bool ok = mongoc_client_command_simple(c, db, cmd, NULL, NULL, error);

    bson_destroy(cmd);
    return ok;
}

static bool create_root_user(mongoc_client_t *c, bson_error_t *error)
{
    bson_t *cmd = BCON_NEW("createUser", BCON_UTF8(ROOT_USER), "pwd", BCON_UTF8(ROOT_PWD),
                           "roles", "[", BCON_UTF8("root"), "]",
                           "mechanisms", "[", BCON_UTF8("SCRAM-SHA-1"),
                           BCON_UTF8("SCRAM-SHA-256"), "]");
    bool ok = mongoc_client_command_simple(c, "admin", cmd, NULL, NULL, error);

    bson_destroy(cmd);
    return ok;
}

/* Insert {_id: label, via: label} into ycsb.usertable and find it back. */
static void insert_find(mongoc_client_t *c, const char *label)
{
    mongoc_collection_t *coll = mongoc_client_get_collection(c, "ycsb", "usertable");
    bson_t *doc = BCON_NEW("_id", BCON_UTF8(label), "via", BCON_UTF8(label));
    bson_t *filter = BCON_NEW("_id", BCON_UTF8(label));
    bson_error_t error;
    mongoc_cursor_t *cur;
    const bson_t *found;
    bson_iter_t it;
    bool ok;

    ok = mongoc_collection_insert_one(coll, doc, NULL, NULL, &error);
    CHECK(ok, "%s: insert_one: %u.%u %s", label, error.domain, error.code, error.message);
    cur = mongoc_collection_find_with_opts(coll, filter, NULL, NULL);
    ok = mongoc_cursor_next(cur, &found);
    if (!ok && mongoc_cursor_error(cur, &error))
        fprintf(stderr, "%s: find: %u.%u %s\n", label, error.domain, error.code, error.message);
    CHECK(ok && bson_iter_init_find(&it, found, "via") && BSON_ITER_HOLDS_UTF8(&it) &&
              strcmp(bson_iter_utf8(&it, NULL), label) == 0,
          "%s: find returned the inserted document", label);
    mongoc_cursor_destroy(cur);
    bson_destroy(filter);
    bson_destroy(doc);
    mongoc_collection_destroy(coll);
}

/* find on ycsb.usertable must fail with the server's code `want`. */
static void find_fails(mongoc_client_t *c, uint32_t want, const char *label)
{
    mongoc_collection_t *coll = mongoc_client_get_collection(c, "ycsb", "usertable");
    bson_t empty = BSON_INITIALIZER;
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, &empty, NULL, NULL);
    const bson_t *found;
    bson_error_t error;
    bool got = mongoc_cursor_next(cur, &found);
    bool err = mongoc_cursor_error(cur, &error);

    CHECK(!got && err && error.domain == MONGOC_ERROR_SERVER && error.code == want,
          "%s: find: got=%d err=%d %u.%u %s (want %u)", label, got, err,
          err ? error.domain : 0, err ? error.code : 0, err ? error.message : "", want);
    mongoc_cursor_destroy(cur);
    mongoc_collection_destroy(coll);
}

/* A wrong password: the first command (ping) fails.  libmongoc replaces the
 * server's code with its own MONGOC_ERROR_CLIENT / _AUTHENTICATE and keeps
 * the server's message, so the server's 18 is checked by sasl_wrong_proof. */
static void wrong_password(const char *rest, const char *label)
{
    mongoc_client_t *c = client_for(ROOT_USER ":wrong-pw@", rest);
    bson_error_t error;
    bool ok;

    if (!c)
        return;
    ok = run_simple(c, "admin", "ping", &error);
    CHECK(!ok && error.domain == MONGOC_ERROR_CLIENT &&
              error.code == MONGOC_ERROR_CLIENT_AUTHENTICATE &&
              strstr(error.message, "Authentication failed.") != NULL,
          "%s: ping with a wrong password: ok=%d %u.%u %s", label, ok, ok ? 0 : error.domain,
          ok ? 0 : error.code, ok ? "" : error.message);
    mongoc_client_destroy(c);
}

/* Drive saslStart / saslContinue by hand on an unauthenticated client with
 * a proof of the right length that cannot be right: the server must answer
 * 18 AuthenticationFailed through mongoc_client_command_simple. */
static void sasl_wrong_proof(mongoc_client_t *c, const char *mech, const char *label)
{
    /* base64 of 20 (SHA-1) or 32 (SHA-256) zero bytes */
    const char *proof = strcmp(mech, "SCRAM-SHA-1") == 0
                            ? "AAAAAAAAAAAAAAAAAAAAAAAAAAA="
                            : "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    const char *first = "n,,n=" ROOT_USER ",r=c2FibGUtbW9uZ29jLW5vbmNl";
    bson_t *cmd = BCON_NEW("saslStart", BCON_INT32(1), "mechanism", BCON_UTF8(mech), "payload",
                           BCON_BIN(BSON_SUBTYPE_BINARY, (const uint8_t *)first,
                                    (uint32_t)strlen(first)),
                           "autoAuthorize", BCON_INT32(1));
    bson_t reply;
    bson_error_t error;
    bson_iter_t it;
    char final[512], server_first[256] = "";
    const uint8_t *data;
    uint32_t len = 0;
    int32_t conv = 0;
    bool ok;

    ok = mongoc_client_command_simple(c, "admin", cmd, NULL, &reply, &error);
    CHECK(ok, "%s: saslStart: %u.%u %s", label, error.domain, error.code, error.message);
    if (ok && bson_iter_init_find(&it, &reply, "conversationId"))
        conv = bson_iter_int32(&it);
    if (ok && bson_iter_init_find(&it, &reply, "payload") && BSON_ITER_HOLDS_BINARY(&it)) {
        bson_iter_binary(&it, NULL, &len, &data);
        if (len < sizeof server_first) {
            memcpy(server_first, data, len);
            server_first[len] = '\0';
        }
    }
    bson_destroy(&reply);
    bson_destroy(cmd);
    CHECK(strncmp(server_first, "r=c2FibGUtbW9uZ29jLW5vbmNl", 26) == 0,
          "%s: server-first message extends the client nonce: '%s'", label, server_first);
    if (!ok || strncmp(server_first, "r=", 2) != 0)
        return;

    char *comma = strchr(server_first, ',');
    if (comma)
        *comma = '\0';
    snprintf(final, sizeof final, "c=biws,%s,p=%s", server_first, proof);
    cmd = BCON_NEW("saslContinue", BCON_INT32(1), "conversationId", BCON_INT32(conv), "payload",
                   BCON_BIN(BSON_SUBTYPE_BINARY, (const uint8_t *)final,
                            (uint32_t)strlen(final)));
    ok = mongoc_client_command_simple(c, "admin", cmd, NULL, NULL, &error);
    CHECK(!ok && error.domain == MONGOC_ERROR_SERVER && error.code == 18 &&
              strcmp(error.message, "Authentication failed.") == 0,
          "%s: saslContinue with a wrong proof: ok=%d %u.%u %s", label, ok,
          ok ? 0 : error.domain, ok ? 0 : error.code, ok ? "" : error.message);
    bson_destroy(cmd);
}

static void test_scram(void)
{
    static const char *const args[] = {"--auth", NULL};
    static const char *const mechs[] = {"SCRAM-SHA-1", "SCRAM-SHA-256"};
    mongoc_client_t *c;
    bson_error_t error;
    char rest[256];
    bool ok;

    if (!start_server("auth", args)) {
        CHECK(false, "sabled --auth did not start");
        return;
    }

    /* The localhost exception: no user yet, an unauthenticated client may
     * create the first one; then it closes. */
    c = client_for("", "");
    if (c) {
        ok = create_root_user(c, &error);
        CHECK(ok, "createUser over the localhost exception: %u.%u %s", error.domain,
              error.code, error.message);
        ok = run_simple(c, "admin", "ping", &error);
        CHECK(ok, "unauthenticated ping: %s", error.message);
        find_fails(c, 13, "unauthenticated");
        bson_t *cmd = BCON_NEW("createUser", BCON_UTF8("second"), "pwd", BCON_UTF8("x"),
                               "roles", "[", "]");
        ok = mongoc_client_command_simple(c, "admin", cmd, NULL, NULL, &error);
        CHECK(!ok && error.code == 13, "second createUser without login: ok=%d code=%u %s", ok,
              ok ? 0 : error.code, ok ? "" : error.message);
        bson_destroy(cmd);
        mongoc_client_destroy(c);
    }

    for (size_t i = 0; i < sizeof mechs / sizeof mechs[0]; i++) {
        snprintf(rest, sizeof rest, "ycsb?authSource=admin&authMechanism=%s", mechs[i]);
        c = client_for(ROOT_USER ":" ROOT_PWD "@", rest);
        if (c) {
            insert_find(c, mechs[i]);
            mongoc_client_destroy(c);
        }
    }
    c = client_for(ROOT_USER ":" ROOT_PWD "@", "ycsb?authSource=admin");
    if (c) {
        insert_find(c, "negotiated");
        mongoc_client_destroy(c);
    }

    c = client_for("", "");
    if (c) {
        sasl_wrong_proof(c, "SCRAM-SHA-1", "raw SCRAM-SHA-1");
        sasl_wrong_proof(c, "SCRAM-SHA-256", "raw SCRAM-SHA-256");
        mongoc_client_destroy(c);
    }
    wrong_password("ycsb?authSource=admin", "default mechanism");
    wrong_password("ycsb?authSource=admin&authMechanism=SCRAM-SHA-1", "SCRAM-SHA-1");
    wrong_password("ycsb?authSource=admin&authMechanism=SCRAM-SHA-256", "SCRAM-SHA-256");
    stop_server();
}

static void test_tls(void)
{
    const char *const args[] = {"--tlsMode", "requireTLS", "--tlsCertificateKeyFile",
                                server_pem, NULL};
    mongoc_client_t *c;
    bson_error_t error;
    char rest[512];
    bool ok;

    if (!start_server("tls", args)) {
        CHECK(false, "sabled --tlsMode requireTLS did not start");
        return;
    }
    snprintf(rest, sizeof rest, "?tls=true&tlsCAFile=%s", ca_path);
    c = client_for("", rest);
    if (c) {
        ok = run_simple(c, "admin", "ping", &error);
        CHECK(ok, "ping over TLS: %u.%u %s", error.domain, error.code, error.message);
        insert_find(c, "tls");
        mongoc_client_destroy(c);
    }
    c = client_for("", "");
    if (c) {
        ok = run_simple(c, "admin", "ping", &error);
        CHECK(!ok, "a plaintext ping was answered under requireTLS");
        mongoc_client_destroy(c);
    }
    /* The server is still serving TLS after refusing plaintext. */
    c = client_for("", rest);
    if (c) {
        ok = run_simple(c, "admin", "ping", &error);
        CHECK(ok, "ping over TLS after a plaintext attempt: %u.%u %s", error.domain, error.code,
              error.message);
        mongoc_client_destroy(c);
    }
    stop_server();
}

static void test_tls_auth(void)
{
    const char *const args[] = {"--auth", "--tlsMode", "requireTLS", "--tlsCertificateKeyFile",
                                server_pem, NULL};
    mongoc_client_t *c;
    bson_error_t error;
    char rest[512];
    bool ok;

    if (!start_server("tlsauth", args)) {
        CHECK(false, "sabled --auth --tlsMode requireTLS did not start");
        return;
    }
    snprintf(rest, sizeof rest, "?tls=true&tlsCAFile=%s", ca_path);
    c = client_for("", rest);
    if (c) {
        ok = create_root_user(c, &error);
        CHECK(ok, "createUser over TLS (localhost exception): %u.%u %s", error.domain,
              error.code, error.message);
        find_fails(c, 13, "TLS, unauthenticated");
        mongoc_client_destroy(c);
    }
    snprintf(rest, sizeof rest, "ycsb?authSource=admin&authMechanism=SCRAM-SHA-256&tls=true&tlsCAFile=%s",
             ca_path);
    c = client_for(ROOT_USER ":" ROOT_PWD "@", rest);
    if (c) {
        insert_find(c, "tls+SCRAM-SHA-256");
        mongoc_client_destroy(c);
    }
    wrong_password(rest, "TLS + SCRAM-SHA-256");
    stop_server();
}

int main(void)
{
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    mongoc_init();
    snprintf(root, sizeof root, "%s/sabled-mongoc-auth-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        root[0] = '\0';
        failed++;
    } else {
        test_scram();
        if (make_certs()) {
            test_tls();
            test_tls_auth();
        } else {
            CHECK(false, "openssl could not make the test certificates");
        }
    }
    mongoc_cleanup();
    cleanup();
    printf("test_mongoc_auth: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
