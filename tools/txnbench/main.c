/*
 * sable-txnbench: issue 26's write comparisons in one run, with a client
 * light enough not to dominate a 2-core machine it shares with the server.
 *
 *   sable-txnbench --uri URI [--threads 8] [--seconds 10] [--docs 10000]
 *                  [--w 1|majority|N] [--rounds 3] [--pids PID,PID,...]
 *                  [--phases plain,retryable,txn] [--marks 1] [--rate OPS]
 *                  [--unix DIR]
 *
 * Each of --threads threads has its own OP_MSG connection (mongo_wire.c:
 * libmongoc connects and selects the primary, the thread writes the commands
 * itself) and its own logical session (a random lsid, as a driver's implicit
 * session), and runs one phase at a time for --seconds after a short
 * warm-up:
 *   plain:      update {_id: k} {$inc: {n: 1}} on a random document, lsid,
 *               no txnNumber (a driver with retryWrites off);
 *   retryable:  the same update with the session's next txnNumber;
 *   txn:        a transaction of two such updates on two different random
 *               documents: update (startTransaction, autocommit: false),
 *               update, commitTransaction, as drivers send them; a
 *               TransientTransactionError aborts it and counts a conflict.
 * Every update and commit carries the same writeConcern {w}.  Phases
 * alternate (plain, retryable, txn, or those --phases names) --rounds times; medians are printed with
 * the ratios the issue names (txn / plain, retryable / plain), and, given the
 * server processes' --pids, their CPU time (/proc utime + stime) per
 * operation in each phase, a transaction counting as one operation.
 * --rate OPS: the threads together start at most OPS operations a second
 * (each on its own schedule), so phases compare at one throughput: the
 * members' per-second costs (heartbeats, fetch rounds, journal flushes)
 * then weigh the same on every phase's CPU per operation, where at full
 * speed a slower phase's look larger.
 * --marks 1: a "mark start|end PHASE OPS USER SYS" line at each measured
 * window's edges (bench/txn-split samples the servers' threads then).
 * --unix DIR: the threads' connections go through the servers' Unix-domain
 * sockets, DIR/mongodb-<port>.sock for the primary's host:port, instead of
 * TCP (the URI still names the TCP hosts: libmongoc's pool finds the
 * primary through them).
 * Asserts nothing; exits non-zero on an error that is not a write conflict.
 */
#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "mongo_wire.h"

enum { PLAIN, RETRYABLE, TXN, NPHASES };
static const char *phase_name[NPHASES] = {"plain", "retryable", "txn"};

#define MAX_PIDS 8
#define MAX_ROUNDS 32

static struct {
    const char *uri_str;
    int threads, docs, rounds;
    double seconds;
    const char *w;
    int pids[MAX_PIDS], npids;
    bool run[NPHASES];
    bool marks;
    double rate; /* operations per second for all threads together; 0: as fast as they go */
} opt = {NULL, 8, 10000, 3, 10.0, "1", {0}, 0, {true, true, true}, false, 0};

static mongoc_uri_t *uri;
static mongoc_client_pool_t *pool;
static atomic_int phase = -1; /* -1: idle; -2: stop */
static atomic_bool failed;

typedef struct worker {
    pthread_t tid;
    int index;
    mongo_wire_t *wire;
    uint8_t lsid[16];
    int64_t txn_number;
    unsigned seed;
    atomic_llong ops, conflicts;
} worker_t;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* --marks: a line at each measured window's start and end, flushed at once,
 * with the operations so far and this process's user and system CPU (s), so
 * a caller (bench/txn-split) samples the servers' threads at those moments. */
static void mark(const char *what, int p, long long ops)
{
    struct rusage ru;
    if (!opt.marks)
        return;
    getrusage(RUSAGE_SELF, &ru);
    printf("mark %s %s %lld %.6f %.6f\n", what, phase_name[p], ops,
           ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
           ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
    fflush(stdout);
}

/* utime + stime of the --pids, in seconds. */
static double server_cpu(void)
{
    double sum = 0;
    for (int i = 0; i < opt.npids; i++) {
        char path[64], buf[1024];
        snprintf(path, sizeof(path), "/proc/%d/stat", opt.pids[i]);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        char *p = strrchr(buf, ')');
        unsigned long ut = 0, st = 0;
        if (p != NULL && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
                                &st) == 2)
            sum += (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    }
    return sum;
}

static void append_wc(bson_t *cmd)
{
    bson_t wc;
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "writeConcern", &wc);
    char *end;
    long n = strtol(opt.w, &end, 10);
    if (*end == '\0')
        BSON_APPEND_INT32(&wc, "w", (int32_t)n);
    else
        BSON_APPEND_UTF8(&wc, "w", opt.w);
    bson_append_document_end(cmd, &wc);
}

static void append_lsid(bson_t *cmd, const worker_t *wk)
{
    bson_t l;
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "lsid", &l);
    BSON_APPEND_BINARY(&l, "id", BSON_SUBTYPE_UUID, wk->lsid, 16);
    bson_append_document_end(cmd, &l);
}

/* The update command for document k; txn: 0 none, 1 a retryable write,
 * 2 a transaction's first statement, 3 its second. */
static void build_update(bson_t *cmd, const worker_t *wk, int k, int txn)
{
    bson_t ups, u, q, m, inc;
    BSON_APPEND_UTF8(cmd, "update", "c");
    BSON_APPEND_ARRAY_BEGIN(cmd, "updates", &ups);
    BSON_APPEND_DOCUMENT_BEGIN(&ups, "0", &u);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "q", &q);
    BSON_APPEND_INT32(&q, "_id", k);
    bson_append_document_end(&u, &q);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "u", &m);
    BSON_APPEND_DOCUMENT_BEGIN(&m, "$inc", &inc);
    BSON_APPEND_INT32(&inc, "n", 1);
    bson_append_document_end(&m, &inc);
    bson_append_document_end(&u, &m);
    bson_append_document_end(&ups, &u);
    bson_append_array_end(cmd, &ups);
    BSON_APPEND_BOOL(cmd, "ordered", true);
    BSON_APPEND_UTF8(cmd, "$db", "txnbench");
    append_lsid(cmd, wk);
    if (txn != 0)
        BSON_APPEND_INT64(cmd, "txnNumber", wk->txn_number);
    if (txn >= 2) {
        if (txn == 2)
            BSON_APPEND_BOOL(cmd, "startTransaction", true);
        BSON_APPEND_BOOL(cmd, "autocommit", false);
    } else
        append_wc(cmd);
}

static void build_end(bson_t *cmd, const worker_t *wk, const char *name)
{
    BSON_APPEND_INT32(cmd, name, 1);
    BSON_APPEND_UTF8(cmd, "$db", "admin");
    append_lsid(cmd, wk);
    BSON_APPEND_INT64(cmd, "txnNumber", wk->txn_number);
    BSON_APPEND_BOOL(cmd, "autocommit", false);
    if (strcmp(name, "commitTransaction") == 0)
        append_wc(cmd);
}

/* 0: ok; 1: a transient transaction error (write conflict); -1: a failure (printed). */
static int check(const worker_t *wk, const bson_t *cmd, bool sent, const bson_t *reply,
                 const bson_error_t *e)
{
    bson_iter_t it, sub;
    if (!sent) {
        fprintf(stderr, "thread %d: %s\n", wk->index, e->message);
        return -1;
    }
    if (bson_iter_init_find(&it, reply, "errorLabels") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &sub))
        while (bson_iter_next(&sub))
            if (BSON_ITER_HOLDS_UTF8(&sub) &&
                strcmp(bson_iter_utf8(&sub, NULL), "TransientTransactionError") == 0)
                return 1;
    bool ok = bson_iter_init_find(&it, reply, "ok") && bson_iter_as_bool(&it);
    if (ok && !bson_iter_init_find(&it, reply, "writeErrors") &&
        !bson_iter_init_find(&it, reply, "writeConcernError"))
        return 0;
    char *c = bson_as_relaxed_extended_json(cmd, NULL), *r = bson_as_relaxed_extended_json(reply, NULL);
    fprintf(stderr, "thread %d: %s -> %s\n", wk->index, c, r);
    bson_free(c);
    bson_free(r);
    return -1;
}

static int run_cmd(worker_t *wk, bson_t *cmd)
{
    bson_t reply;
    bson_error_t e;
    bool sent = mongo_wire_command(wk->wire, cmd, false, &reply, &e);
    return check(wk, cmd, sent, sent ? &reply : NULL, &e);
}

/* One operation of phase p: 0 done, 1 a conflict, -1 a failure. */
static int one_op(worker_t *wk, int p)
{
    bson_t cmd = BSON_INITIALIZER;
    int rc, k = rand_r(&wk->seed) % opt.docs;

    if (p != TXN) {
        if (p == RETRYABLE)
            wk->txn_number++;
        build_update(&cmd, wk, k, p == RETRYABLE ? 1 : 0);
        rc = run_cmd(wk, &cmd);
        bson_destroy(&cmd);
        return rc;
    }
    int k2 = rand_r(&wk->seed) % (opt.docs - 1);
    if (k2 >= k)
        k2++;
    wk->txn_number++;
    build_update(&cmd, wk, k, 2);
    rc = run_cmd(wk, &cmd);
    if (rc == 0) {
        bson_reinit(&cmd);
        build_update(&cmd, wk, k2, 3);
        rc = run_cmd(wk, &cmd);
    }
    bson_reinit(&cmd);
    build_end(&cmd, wk, rc == 0 ? "commitTransaction" : "abortTransaction");
    int end = run_cmd(wk, &cmd);
    bson_destroy(&cmd);
    if (rc != 0)
        return rc;
    return end;
}

/* --rate: each thread starts an operation every threads / rate seconds (a
 * late one starts at once, and the schedule does not catch up). */
static void pace(struct timespec *next)
{
    struct timespec now_ts;
    long step = (long)(opt.threads / opt.rate * 1e9);
    clock_gettime(CLOCK_MONOTONIC, &now_ts);
    if (next->tv_sec == 0 || now_ts.tv_sec > next->tv_sec ||
        (now_ts.tv_sec == next->tv_sec && now_ts.tv_nsec >= next->tv_nsec)) {
        *next = now_ts; /* late (or the first): no sleep, no catching up */
    } else {
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, next, NULL);
    }
    next->tv_nsec += step % 1000000000L;
    next->tv_sec += step / 1000000000L + next->tv_nsec / 1000000000L;
    next->tv_nsec %= 1000000000L;
}

static void *worker_main(void *arg)
{
    worker_t *wk = arg;
    struct timespec next = {0, 0};
    int p;
    while ((p = atomic_load(&phase)) != -2) {
        if (p < 0 || atomic_load(&failed)) {
            usleep(1000);
            next.tv_sec = 0;
            continue;
        }
        if (opt.rate > 0)
            pace(&next);
        int rc = one_op(wk, p);
        if (rc < 0) {
            atomic_store(&failed, true);
            continue;
        }
        if (rc == 1)
            atomic_fetch_add(&wk->conflicts, 1);
        else
            atomic_fetch_add(&wk->ops, 1);
    }
    return NULL;
}

static long long total(worker_t *w, bool conflicts)
{
    long long n = 0;
    for (int i = 0; i < opt.threads; i++)
        n += atomic_load(conflicts ? &w[i].conflicts : &w[i].ops);
    return n;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int setup(void)
{
    mongoc_client_t *c = mongoc_client_pool_pop(pool);
    mongoc_collection_t *coll = mongoc_client_get_collection(c, "txnbench", "c");
    bson_error_t e;
    bson_t **docs = malloc(sizeof(*docs) * (size_t)opt.docs);
    int rc = 0;

    mongoc_collection_drop(coll, NULL);
    for (int i = 0; i < opt.docs; i++)
        docs[i] = BCON_NEW("_id", BCON_INT32(i), "n", BCON_INT32(0));
    if (!mongoc_collection_insert_many(coll, (const bson_t **)docs, (size_t)opt.docs, NULL, NULL,
                                       &e)) {
        fprintf(stderr, "sable-txnbench: insert: %s\n", e.message);
        rc = -1;
    }
    for (int i = 0; i < opt.docs; i++)
        bson_destroy(docs[i]);
    free(docs);
    mongoc_collection_destroy(coll);
    mongoc_client_pool_push(pool, c);
    return rc;
}

static void usage(void)
{
    fprintf(stderr, "usage: sable-txnbench --uri URI [--threads N] [--seconds S] [--docs N] "
                    "[--w W] [--rounds N] [--pids PID,...] [--phases P,...] [--rate OPS] "
                    "[--marks 1] [--unix DIR]\n");
    exit(2);
}

static void parse(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL)
            usage();
        i++;
        if (strcmp(a, "--uri") == 0)
            opt.uri_str = v;
        else if (strcmp(a, "--threads") == 0)
            opt.threads = atoi(v);
        else if (strcmp(a, "--seconds") == 0)
            opt.seconds = atof(v);
        else if (strcmp(a, "--docs") == 0)
            opt.docs = atoi(v);
        else if (strcmp(a, "--w") == 0)
            opt.w = v;
        else if (strcmp(a, "--rate") == 0)
            opt.rate = atof(v);
        else if (strcmp(a, "--unix") == 0)
            mongo_wire_set_unix_dir(v);
        else if (strcmp(a, "--marks") == 0)
            opt.marks = atoi(v) != 0;
        else if (strcmp(a, "--rounds") == 0)
            opt.rounds = atoi(v);
        else if (strcmp(a, "--pids") == 0) {
            char *dup = strdup(v), *save = NULL;
            for (char *t = strtok_r(dup, ",", &save); t && opt.npids < MAX_PIDS;
                 t = strtok_r(NULL, ",", &save))
                opt.pids[opt.npids++] = atoi(t);
            free(dup);
        } else if (strcmp(a, "--phases") == 0) {
            for (int p = 0; p < NPHASES; p++) {
                const char *f = strstr(v, phase_name[p]);
                size_t n = strlen(phase_name[p]);
                opt.run[p] = f != NULL && (f == v || f[-1] == ',') && (f[n] == ',' || !f[n]);
            }
        } else
            usage();
    }
    if (opt.uri_str == NULL || opt.threads < 1 || opt.docs < 2 || opt.seconds <= 0 ||
        opt.rounds < 1 || opt.rounds > MAX_ROUNDS || opt.rate < 0)
        usage();
}

/* libmongoc's warnings and errors only (not its debug chatter). */
static void log_handler(mongoc_log_level_t level, const char *domain, const char *message,
                        void *data)
{
    if (level <= MONGOC_LOG_LEVEL_WARNING)
        fprintf(stderr, "%s: %s\n", domain, message);
}

int main(int argc, char **argv)
{
    bson_error_t e;
    double rate[NPHASES][MAX_ROUNDS] = {{0}}, cpu[NPHASES][MAX_ROUNDS] = {{0}};
    long long conflicts = 0;

    parse(argc, argv);
    mongoc_init();
    mongoc_log_set_handler(log_handler, NULL);
    if ((uri = mongoc_uri_new_with_error(opt.uri_str, &e)) == NULL) {
        fprintf(stderr, "sable-txnbench: %s\n", e.message);
        return 2;
    }
    if (!mongo_wire_usable(uri)) {
        fprintf(stderr, "sable-txnbench: needs a plain TCP URI reading from the primary\n");
        return 2;
    }
    pool = mongoc_client_pool_new(uri);
    if (setup() != 0)
        return 1;
    worker_t *w = calloc((size_t)opt.threads, sizeof(*w));
    for (int i = 0; i < opt.threads; i++) {
        w[i].index = i;
        w[i].seed = (unsigned)(i * 7919 + time(NULL));
        for (int b = 0; b < 16; b++)
            w[i].lsid[b] = (uint8_t)rand_r(&w[i].seed);
        w[i].lsid[6] = (uint8_t)((w[i].lsid[6] & 0x0f) | 0x40); /* a version 4 UUID */
        w[i].lsid[8] = (uint8_t)((w[i].lsid[8] & 0x3f) | 0x80);
        if ((w[i].wire = mongo_wire_open(uri, pool, "sable-txnbench", &e)) == NULL) {
            fprintf(stderr, "sable-txnbench: connect: %s\n", e.message);
            return 1;
        }
        pthread_create(&w[i].tid, NULL, worker_main, &w[i]);
    }
    double warm = opt.seconds / 4 < 2.0 ? opt.seconds / 4 : 2.0;
    for (int r = 0; r < opt.rounds && !atomic_load(&failed); r++) {
        for (int p = 0; p < NPHASES && !atomic_load(&failed); p++) {
            if (!opt.run[p])
                continue;
            atomic_store(&phase, p);
            usleep((useconds_t)(warm * 1e6));
            long long n0 = total(w, false), k0 = total(w, true);
            double t0 = now(), c0 = server_cpu();
            mark("start", p, n0);
            usleep((useconds_t)(opt.seconds * 1e6));
            long long n1 = total(w, false), k1 = total(w, true);
            double t1 = now(), c1 = server_cpu();
            mark("end", p, n1);
            atomic_store(&phase, -1);
            rate[p][r] = (double)(n1 - n0) / (t1 - t0);
            cpu[p][r] = n1 > n0 ? (c1 - c0) * 1e6 / (double)(n1 - n0) : 0;
            if (p == TXN)
                conflicts += k1 - k0;
            printf("round %d %-9s %8.0f ops/s", r + 1, phase_name[p], rate[p][r]);
            if (opt.npids > 0)
                printf("  server CPU %6.0f us/op", cpu[p][r]);
            if (p == TXN)
                printf("  (%lld conflicts)", k1 - k0);
            printf("\n");
            fflush(stdout);
        }
    }
    atomic_store(&phase, -2);
    for (int i = 0; i < opt.threads; i++) {
        pthread_join(w[i].tid, NULL);
        mongo_wire_close(w[i].wire);
    }
    free(w);
    if (atomic_load(&failed)) {
        fprintf(stderr, "sable-txnbench: stopped on an error\n");
        return 1;
    }
    double m[NPHASES], mc[NPHASES];
    for (int p = 0; p < NPHASES; p++) {
        m[p] = median(rate[p], opt.rounds);
        mc[p] = median(cpu[p], opt.rounds);
    }
    printf("median (%d threads, w: %s, %d rounds of %.0f s):\n", opt.threads, opt.w, opt.rounds,
           opt.seconds);
    for (int p = 0; p < NPHASES; p++) {
        if (!opt.run[p])
            continue;
        printf("  %-9s %8.0f ops/s", phase_name[p], m[p]);
        if (opt.npids > 0)
            printf("  server CPU %6.0f us/op", mc[p]);
        printf("\n");
    }
    if (opt.run[TXN] && opt.run[PLAIN])
        printf("txn / plain:        %.2f (target >= 0.4)\n", m[TXN] / m[PLAIN]);
    if (opt.run[TXN] && opt.run[RETRYABLE])
        printf("txn / retryable:    %.2f\n", m[TXN] / m[RETRYABLE]);
    if (opt.run[RETRYABLE] && opt.run[PLAIN]) {
        printf("retryable / plain:  %.2f throughput", m[RETRYABLE] / m[PLAIN]);
        if (opt.npids > 0)
            printf(", %.2f server CPU per op (target <= 1.10)", mc[RETRYABLE] / mc[PLAIN]);
        printf("\n");
    }
    if (opt.run[TXN])
        printf("transaction conflicts: %lld\n", conflicts);
    mongoc_client_pool_destroy(pool);
    mongoc_uri_destroy(uri);
    mongoc_cleanup();
    return 0;
}
