/*
 * client.c: the YCSB Client loop for sable-bench (see client.h).
 *
 * One pthread per client thread, each with its own stats and workload state;
 * an optional status thread prints YCSB's status line; maxexecutiontime sets
 * a stop flag that the threads poll between operations.
 */
#include "client.h"
#include "chart.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "db.h"
#include "workload.h"

const bench_db_t *bench_db_find(const char *name)
{
    if (strcmp(name, "mongodb") == 0 || strcmp(name, "site.ycsb.db.MongoDbClient") == 0 ||
        strcmp(name, "com.yahoo.ycsb.db.MongoDbClient") == 0)
        return &bench_db_mongodb;
    if (strcmp(name, "redis") == 0 || strcmp(name, "site.ycsb.db.RedisClient") == 0)
        return &bench_db_redis;
    if (strcmp(name, "postgres") == 0 || strcmp(name, "postgrenosql") == 0 ||
        strcmp(name, "site.ycsb.postgrenosql.PostgreNoSQLDBClient") == 0)
        return &bench_db_postgres;
    return NULL;
}

typedef struct client_shared {
    bench_workload_t *wl;
    const bench_db_t *db;
    void *dbshared;
    bool load;
    atomic_bool stop;
    atomic_int failed_threads;
} client_shared_t;

typedef struct client_thread {
    client_shared_t *sh;
    int id;
    int64_t opcount;  /* 0 = until stopped */
    double tick_ns;   /* pacing interval, 0 = unpaced */
    bench_stats_t *stats;
    pthread_t tid;
} client_thread_t;

static void sleep_until(uint64_t deadline_ns)
{
    for (;;) {
        uint64_t now = bench_now_ns();
        if (now >= deadline_ns)
            return;
        uint64_t d = deadline_ns - now;
        struct timespec ts = {.tv_sec = (time_t)(d / 1000000000ULL), .tv_nsec = (long)(d % 1000000000ULL)};
        nanosleep(&ts, NULL);
    }
}

static void *client_thread_main(void *arg)
{
    client_thread_t *ct = arg;
    client_shared_t *sh = ct->sh;
    char err[512];
    void *ctx = NULL;
    if (sh->db->thread_init(sh->dbshared, &ctx, err, sizeof(err)) != 0) {
        fprintf(stderr, "thread %d: %s\n", ct->id, err);
        atomic_fetch_add(&sh->failed_threads, 1);
        return NULL;
    }
    bench_wthread_t t;
    uint64_t seed = bench_now_ns() ^ ((uint64_t)ct->id * 0x9E3779B97F4A7C15ULL);
    if (bench_wthread_init(&t, sh->wl, sh->db, ctx, ct->stats, seed) != 0) {
        fprintf(stderr, "thread %d: out of memory\n", ct->id);
        atomic_fetch_add(&sh->failed_threads, 1);
        sh->db->thread_cleanup(ctx);
        return NULL;
    }
    /* Spread paced threads over one tick so they do not fire in lock step (YCSB does this
     * for rates up to one operation per millisecond per thread). */
    if (ct->tick_ns >= 1e6)
        sleep_until(bench_now_ns() + bench_rng_next(&t.rng) % (uint64_t)ct->tick_ns);
    uint64_t start = bench_now_ns();
    int64_t done = 0;
    while ((ct->opcount == 0 || done < ct->opcount) && !atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
        if (sh->load) {
            if (!bench_do_insert(&t))
                break; /* YCSB stops a loading thread at its first failed insert */
        } else {
            bench_do_transaction(&t);
        }
        done++;
        bench_stats_done(ct->stats);
        if (ct->tick_ns > 0) {
            uint64_t deadline = start + (uint64_t)((double)done * ct->tick_ns);
            sleep_until(deadline);
            t.intended_ns = deadline;
        }
    }
    uint64_t s = bench_now_ns();
    t.intended_ns = 0;
    bench_status_t cst = sh->db->thread_cleanup(ctx);
    uint64_t e = bench_now_ns();
    bench_stats_record(ct->stats, sh->wl->mode, BENCH_OP_CLEANUP, BENCH_NSTATUS, (e - s) / 1000, (e - s) / 1000);
    if (!bench_status_ok(cst)) /* a failed final batch flush is an error, not hidden */
        bench_stats_record(ct->stats, sh->wl->mode, BENCH_OP_INSERT, cst, (e - s) / 1000, (e - s) / 1000);
    bench_wthread_free(&t);
    return NULL;
}

typedef struct status_ctx {
    client_thread_t *threads;
    bench_stats_t **stats;
    int n;
    uint64_t start_ns;
    uint64_t planned;
    int interval_s;
    const char *label;
    bench_interval_t mode;
    atomic_bool finished;
    int64_t maxexec_s;
    client_shared_t *sh;
    bench_status_line_t sl;
    bench_chart_t *chart; /* --chart: a point per interval, or NULL */
    bool print;           /* -s: print the status line */
    pthread_mutex_t lock;
    pthread_cond_t cond;
} status_ctx_t;

static void status_print(status_ctx_t *sc)
{
    uint64_t elapsed = (bench_now_ns() - sc->start_ns) / 1000000ULL;
    if (sc->chart != NULL)
        bench_chart_sample(sc->chart, sc->stats, sc->n, elapsed);
    if (!sc->print)
        return;
    char *line = malloc(65536);
    if (line == NULL)
        return;
    if (bench_status_format(&sc->sl, line, 65536, sc->stats, sc->n, elapsed, sc->planned, sc->mode) == 0)
        fprintf(stderr, "%s%s\n", sc->label, line);
    free(line);
}

/* Wakes every status interval (when status is on) and at maxexecutiontime. */
static void *status_thread_main(void *arg)
{
    status_ctx_t *sc = arg;
    uint64_t next_status = sc->start_ns + (uint64_t)sc->interval_s * 1000000000ULL;
    uint64_t stop_at = sc->maxexec_s > 0 ? sc->start_ns + (uint64_t)sc->maxexec_s * 1000000000ULL : 0;
    pthread_mutex_lock(&sc->lock);
    while (!atomic_load(&sc->finished)) {
        uint64_t wake = sc->interval_s > 0 ? next_status : UINT64_MAX;
        if (stop_at && stop_at < wake)
            wake = stop_at;
        if (wake == UINT64_MAX)
            wake = bench_now_ns() + 1000000000ULL;
        /* The condition variable uses CLOCK_MONOTONIC (set at init), like bench_now_ns. */
        struct timespec ts = {.tv_sec = (time_t)(wake / 1000000000ULL), .tv_nsec = (long)(wake % 1000000000ULL)};
        pthread_cond_timedwait(&sc->cond, &sc->lock, &ts);
        uint64_t now = bench_now_ns();
        if (stop_at && now >= stop_at && !atomic_load(&sc->sh->stop)) {
            fprintf(stderr, "Maximum execution time elapsed. Requesting stop for the workload.\n");
            atomic_store(&sc->sh->stop, true);
        }
        if (sc->interval_s > 0 && now >= next_status && !atomic_load(&sc->finished)) {
            pthread_mutex_unlock(&sc->lock);
            status_print(sc);
            pthread_mutex_lock(&sc->lock);
            next_status += (uint64_t)sc->interval_s * 1000000000ULL;
        }
    }
    pthread_mutex_unlock(&sc->lock);
    return NULL;
}

static double cpu_ms(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

static int parse_percentiles(const char *s, double *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        double v = strtod(s, &end);
        if (end == s)
            return -1;
        out[n++] = v;
        s = end;
        while (*s == ',' || *s == ' ')
            s++;
    }
    return n;
}

int bench_client_run(const bench_options_t *o, FILE *out)
{
    const bench_props_t *p = &o->props;
    char err[1024];
    int rc = 2;
    const bench_db_t *db = bench_db_find(o->dbname);
    if (db == NULL) {
        fprintf(stderr, "Unknown database binding \"%s\" (mongodb, redis, postgres)\n", o->dbname);
        return 2;
    }
    bool bad = false;
    int threads = (int)bench_props_int(p, "threadcount", 1, &bad);
    double target = bench_props_double(p, "target", 0, &bad);
    int64_t maxexec = bench_props_int(p, "maxexecutiontime", 0, &bad);
    int status_interval = (int)bench_props_int(p, "status.interval", 10, &bad);
    bool status = bench_props_bool(p, "status", false);
    int64_t opcount;
    if (!o->load)
        opcount = bench_props_int(p, "operationcount", 0, &bad);
    else if (bench_props_has(p, "insertcount"))
        opcount = bench_props_int(p, "insertcount", 0, &bad);
    else
        opcount = bench_props_int(p, "recordcount", 0, &bad);
    double pcts[16];
    int npcts = parse_percentiles(bench_props_str(p, "hdrhistogram.percentiles", "95,99"), pcts, 16);
    if (bad || threads < 1 || npcts < 0 || opcount < 0 || status_interval < 1) {
        fprintf(stderr, "invalid numeric property (threadcount, target, operationcount, recordcount, "
                        "maxexecutiontime, status.interval or hdrhistogram.percentiles)\n");
        return 2;
    }

    fprintf(stderr, "sable-bench (YCSB 0.17.0 compatible) %s %s\n\nLoading workload...\n", o->load ? "load" : "run",
            db->name);
    bench_workload_t wl;
    if (bench_workload_init(&wl, p, err, sizeof(err)) != 0) {
        fprintf(stderr, "workload: %s\n", err);
        return 2;
    }
    void *dbshared = NULL;
    if (db->open(p, threads, &dbshared, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", db->name, err);
        bench_workload_free(&wl);
        return 2;
    }
    fprintf(stderr, "Starting test.\n");

    bench_chart_t chart;
    memset(&chart, 0, sizeof(chart));
    client_shared_t sh = {.wl = &wl, .db = db, .dbshared = dbshared, .load = o->load};
    atomic_init(&sh.stop, false);
    atomic_init(&sh.failed_threads, 0);
    client_thread_t *ct = calloc((size_t)threads, sizeof(*ct));
    bench_stats_t **stats = calloc((size_t)threads, sizeof(*stats));
    if (ct == NULL || stats == NULL)
        goto oom;
    for (int i = 0; i < threads; i++) {
        stats[i] = bench_stats_new();
        if (stats[i] == NULL)
            goto oom;
        ct[i].sh = &sh;
        ct[i].id = i;
        ct[i].stats = stats[i];
        ct[i].opcount = opcount / threads + (i < opcount % threads ? 1 : 0);
        ct[i].tick_ns = target > 0 ? 1e9 / (target / threads) : 0;
        if (opcount > 0 && ct[i].opcount == 0)
            ct[i].opcount = -1; /* more threads than operations: this one has nothing to do */
    }

    status_ctx_t sc = {.threads = ct, .stats = stats, .n = threads, .planned = (uint64_t)opcount,
                       .interval_s = status || o->chart[0] ? status_interval : 0,
                       .label = bench_props_str(p, "label", ""), .print = status,
                       .chart = o->chart[0] ? &chart : NULL,
                       .mode = wl.mode, .maxexec_s = maxexec, .sh = &sh};
    atomic_init(&sc.finished, false);
    pthread_mutex_init(&sc.lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sc.cond, &ca);
    pthread_condattr_destroy(&ca);

    double cpu0 = cpu_ms();
    uint64_t t0 = bench_now_ns();
    sc.start_ns = t0;
    int started = 0;
    for (int i = 0; i < threads; i++) {
        if (ct[i].opcount < 0)
            continue;
        if (pthread_create(&ct[i].tid, NULL, client_thread_main, &ct[i]) != 0) {
            fprintf(stderr, "cannot start client thread %d: %s\n", i, strerror(errno));
            atomic_fetch_add(&sh.failed_threads, 1);
            ct[i].opcount = -1;
            continue;
        }
        started++;
    }
    pthread_t stid;
    bool have_status = false;
    if (status || maxexec > 0 || o->chart[0])
        have_status = pthread_create(&stid, NULL, status_thread_main, &sc) == 0;
    for (int i = 0; i < threads; i++)
        if (ct[i].opcount >= 0)
            pthread_join(ct[i].tid, NULL);
    uint64_t t1 = bench_now_ns();
    double cpu1 = cpu_ms();
    if (have_status) {
        pthread_mutex_lock(&sc.lock);
        atomic_store(&sc.finished, true);
        pthread_cond_signal(&sc.cond);
        pthread_mutex_unlock(&sc.lock);
        pthread_join(stid, NULL);
    }
    if (status || o->chart[0])
        status_print(&sc); /* YCSB's final status line (and the chart's last point) */
    bench_status_line_free(&sc.sl);
    pthread_cond_destroy(&sc.cond);
    pthread_mutex_destroy(&sc.lock);
    db->close(dbshared);
    dbshared = NULL;

    bench_report_t rep;
    memset(&rep, 0, sizeof(rep));
    if (bench_report_collect(&rep, stats, threads) != 0)
        goto oom;
    bench_summary_info_t info = {.runtime_ms = (t1 - t0) / 1000000ULL,
                                 .cpu_ms = (cpu0 >= 0 && cpu1 >= 0) ? cpu1 - cpu0 : -1,
                                 .percentiles = pcts, .npercentiles = npcts, .mode = wl.mode};
    const char *exportfile = bench_props_get(p, "exportfile");
    FILE *dst = out;
    if (exportfile) {
        dst = fopen(exportfile, "w");
        if (dst == NULL) {
            fprintf(stderr, "cannot write %s: %s\n", exportfile, strerror(errno));
            dst = out;
        }
    }
    bench_report_print(dst, &rep, &info);
    if (o->chart[0]) {
        char title[512];
        snprintf(title, sizeof(title), "sable-bench %s %s, %d thread%s", o->load ? "load" : "run", db->name,
                 threads, threads == 1 ? "" : "s");
        if (bench_chart_write(&chart, o->chart, title, err, sizeof(err)) == 0)
            fprintf(stderr, "chart: %s (%zu points, one per %d s)\n", o->chart, chart.n, status_interval);
        else
            fprintf(stderr, "sable-bench: --chart %s: %s\n", o->chart, err);
    }
    if (dst != out)
        fclose(dst);
    uint64_t errors = bench_report_errors(&rep);
    int failed_threads = atomic_load(&sh.failed_threads);
    rc = 0;
    if (errors > 0) {
        fprintf(stderr, "sable-bench: %" PRIu64 " operations failed\n", errors);
        rc = 1;
    }
    if (failed_threads > 0) {
        fprintf(stderr, "sable-bench: %d client threads could not start\n", failed_threads);
        rc = 1;
    }
    (void)started;
    bench_report_free(&rep);
    goto done;
oom:
    fprintf(stderr, "sable-bench: out of memory\n");
    rc = 2;
done:
    if (dbshared)
        db->close(dbshared);
    if (stats)
        for (int i = 0; i < threads; i++)
            bench_stats_free(stats[i]);
    free(stats);
    free(ct);
    bench_chart_free(&chart);
    bench_workload_free(&wl);
    return rc;
}
