/*
 * chart.h: sable-bench --chart FILE.png: throughput and latency over the
 * run, one point per status interval (status.interval, default 10 s), drawn
 * by gnuplot after the run, like the figures of the benchmark reports.
 *
 * Must stay true: a point covers exactly the operations finished in its
 * interval (the difference of two snapshots of the threads' histograms), so
 * the points' operations add up to the run's; a chart that cannot be drawn
 * (no gnuplot, no points) is reported, never fails the run.
 */
#ifndef SBENCH_CHART_H
#define SBENCH_CHART_H

#include <stdint.h>

#include "measure.h"

typedef struct bench_chart_point {
    double t_s;                   /* seconds since the start, at the interval's end */
    double ops_per_s;             /* operations finished in the interval per second */
    double avg_ms[BENCH_NOPS];    /* mean latency per operation type; NaN: none in the interval */
    double p99_ms[BENCH_NOPS];
} bench_chart_point_t;

typedef struct bench_chart {
    bench_chart_point_t *points;
    size_t n, cap;
    bench_report_t prev; /* the previous snapshot */
    uint64_t prev_ops, prev_ms;
} bench_chart_t;

/* Append a point for the interval since the previous call (or the start). */
int bench_chart_sample(bench_chart_t *c, bench_stats_t *const *stats, int nthreads, uint64_t elapsed_ms);
/* Append a point as is (tests). Returns 0 or -1 (out of memory). */
int bench_chart_add(bench_chart_t *c, const bench_chart_point_t *p);
/* Draw the PNG at path with gnuplot (two panels sharing the time axis:
 * throughput; mean and p99 latency of each operation type that ran).
 * Returns 0, or -1 with a message in err. */
int bench_chart_write(const bench_chart_t *c, const char *path, const char *title, char *err, size_t errlen);
void bench_chart_free(bench_chart_t *c);

#endif
