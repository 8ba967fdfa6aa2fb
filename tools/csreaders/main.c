/*
 * sable-cs-readers: N change streams on one collection, each on its own
 * thread and connection (libmongoc's watch(), as an application opens it),
 * each reading every event until its standard input closes; for
 * scripts/changestream-bench.py, so that 100 open streams cost the client
 * little CPU and the benchmark measures the server.
 *
 *   sable-cs-readers URI DB COLL NSTREAMS [MAX_AWAIT_MS]
 *
 * Prints "ready" once every stream is open, and at the end one line:
 *   events <total> min <per stream> max <per stream> cpu <seconds>
 * (cpu: this process's user + system time).
 */
#include <bson/bson.h>
#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

typedef struct reader {
    pthread_t thread;
    mongoc_client_pool_t *pool;
    const char *db, *coll;
    int64_t await_ms;
    int64_t events;
    bool failed;
} reader_t;

static atomic_bool stop;
static atomic_int opened;

static void *run(void *arg)
{
    reader_t *r = arg;
    mongoc_client_t *c = mongoc_client_pool_pop(r->pool);
    mongoc_collection_t *coll = mongoc_client_get_collection(c, r->db, r->coll);
    bson_t pipeline = BSON_INITIALIZER, opts = BSON_INITIALIZER;
    BSON_APPEND_INT64(&opts, "maxAwaitTimeMS", r->await_ms);
    mongoc_change_stream_t *cs = mongoc_collection_watch(coll, &pipeline, &opts);
    const bson_t *doc, *reply;
    bson_error_t err;
    if (mongoc_change_stream_error_document(cs, &err, &reply)) {
        fprintf(stderr, "watch: %s\n", err.message);
        r->failed = true;
    }
    atomic_fetch_add(&opened, 1);
    while (!r->failed && !atomic_load(&stop)) {
        while (mongoc_change_stream_next(cs, &doc))
            r->events++;
        if (mongoc_change_stream_error_document(cs, &err, &reply)) {
            fprintf(stderr, "getMore: %s\n", err.message);
            r->failed = true;
        }
    }
    mongoc_change_stream_destroy(cs);
    bson_destroy(&pipeline);
    bson_destroy(&opts);
    mongoc_collection_destroy(coll);
    mongoc_client_pool_push(r->pool, c);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s URI DB COLL NSTREAMS [MAX_AWAIT_MS]\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[4]);
    if (n < 1 || n > 10000) {
        fprintf(stderr, "NSTREAMS: 1..10000\n");
        return 2;
    }
    mongoc_init();
    bson_error_t err;
    mongoc_uri_t *uri = mongoc_uri_new_with_error(argv[1], &err);
    if (uri == NULL) {
        fprintf(stderr, "URI: %s\n", err.message);
        return 2;
    }
    mongoc_uri_set_option_as_int32(uri, MONGOC_URI_MAXPOOLSIZE, n);
    mongoc_client_pool_t *pool = mongoc_client_pool_new(uri);
    reader_t *rs = calloc((size_t)n, sizeof(*rs));
    for (int i = 0; i < n; i++) {
        rs[i] = (reader_t){.pool = pool, .db = argv[2], .coll = argv[3],
                           .await_ms = argc > 5 ? atoll(argv[5]) : 200};
        pthread_create(&rs[i].thread, NULL, run, &rs[i]);
    }
    while (atomic_load(&opened) < n)
        usleep(10000);
    printf("ready\n");
    fflush(stdout);
    char buf[256];
    while (fread(buf, 1, sizeof(buf), stdin) > 0) /* until the benchmark closes it */
        ;
    atomic_store(&stop, true);
    int64_t total = 0, lo = INT64_MAX, hi = 0;
    bool failed = false;
    for (int i = 0; i < n; i++) {
        pthread_join(rs[i].thread, NULL);
        total += rs[i].events;
        lo = rs[i].events < lo ? rs[i].events : lo;
        hi = rs[i].events > hi ? rs[i].events : hi;
        failed |= rs[i].failed;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("events %lld min %lld max %lld cpu %.3f\n", (long long)total, (long long)lo,
           (long long)hi, ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
                              ru.ru_stime.tv_usec / 1e6);
    free(rs);
    mongoc_client_pool_destroy(pool);
    mongoc_uri_destroy(uri);
    mongoc_cleanup();
    return failed ? 1 : 0;
}
