/*
 * test_bench_chart.c: sable-bench --chart: points from the threads'
 * histograms cover exactly each interval's operations, and gnuplot turns
 * them into a PNG (gnuplot-nox, scripts/deps.sh).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chart.h"
#include "check.h"

static void record(bench_stats_t *st, bench_op_t op, int n, uint64_t us)
{
    for (int i = 0; i < n; i++) {
        bench_stats_record(st, BENCH_INTERVAL_OP, op, BENCH_OK, us, us);
        bench_stats_done(st);
    }
}

static void test_points_follow_intervals(void)
{
    bench_stats_t *st = bench_stats_new();
    bench_chart_t c;
    memset(&c, 0, sizeof(c));
    record(st, BENCH_OP_READ, 1000, 200);
    CHECK(bench_chart_sample(&c, &st, 1, 1000) == 0);
    record(st, BENCH_OP_READ, 500, 400);
    record(st, BENCH_OP_UPDATE, 500, 1000);
    CHECK(bench_chart_sample(&c, &st, 1, 3000) == 0);
    CHECK(c.n == 2);
    CHECK(fabs(c.points[0].ops_per_s - 1000.0) < 1e-6);
    CHECK(fabs(c.points[1].ops_per_s - 500.0) < 1e-6); /* 1000 operations in 2 s */
    CHECK(fabs(c.points[0].avg_ms[BENCH_OP_READ] - 0.2) < 0.01);
    CHECK(isnan(c.points[0].avg_ms[BENCH_OP_UPDATE]));
    CHECK(fabs(c.points[1].avg_ms[BENCH_OP_READ] - 0.4) < 0.01); /* the interval's only */
    CHECK(fabs(c.points[1].p99_ms[BENCH_OP_UPDATE] - 1.0) < 0.02);
    CHECK(c.points[1].t_s == 3.0);

    char path[] = "/tmp/test-bench-chart-XXXXXX.png";
    int fd = mkstemps(path, 4);
    CHECK(fd >= 0);
    close(fd);
    char err[256] = "";
    int rc = bench_chart_write(&c, path, "test_bench_chart", err, sizeof(err));
    CHECK_MSG(rc == 0, "%s", err);
    unsigned char sig[8] = {0};
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL && fread(sig, 1, 8, f) == 8);
    if (f)
        fclose(f);
    CHECK(memcmp(sig, "\x89PNG\r\n\x1a\n", 8) == 0);
    unlink(path);
    bench_chart_free(&c);
    bench_stats_free(st);
}

static void test_no_points_is_an_error_not_a_crash(void)
{
    bench_chart_t c;
    memset(&c, 0, sizeof(c));
    char err[256] = "";
    CHECK(bench_chart_write(&c, "/tmp/never.png", "x", err, sizeof(err)) == -1);
    CHECK(strstr(err, "no points") != NULL);
}

int main(void)
{
    test_points_follow_intervals();
    test_no_points_is_an_error_not_a_crash();
    return CHECK_DONE("test_bench_chart");
}
