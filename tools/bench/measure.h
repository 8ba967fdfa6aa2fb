/*
 * measure.h: latency histograms and YCSB's text output for sable-bench.
 *
 * Each client thread owns a bench_stats_t and is its only writer: recording
 * is a handful of relaxed loads and stores, no lock and no read-modify-write.
 * The status thread and the final report read those counters concurrently
 * and merge them; a reader may see a record half-applied (count before sum),
 * which only blurs one interval line, never the final summary (taken after
 * the threads are joined).
 *
 * Histograms are log-linear (HdrHistogram's layout with 128 sub-buckets per
 * power of two), so any value is reported within 1/128 (< 0.8%) of itself.
 */
#ifndef SBENCH_MEASURE_H
#define SBENCH_MEASURE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Operations as YCSB names them in its output. */
typedef enum bench_op {
    BENCH_OP_INSERT,
    BENCH_OP_READ,
    BENCH_OP_UPDATE,
    BENCH_OP_SCAN,
    BENCH_OP_RMW,
    BENCH_OP_DELETE,
    BENCH_OP_CLEANUP,
    BENCH_NOPS
} bench_op_t;

/* YCSB's Status values; OK and BATCHED_OK are the successful ones. */
typedef enum bench_status {
    BENCH_OK,
    BENCH_ERROR,
    BENCH_NOT_FOUND,
    BENCH_NOT_IMPLEMENTED,
    BENCH_UNEXPECTED_STATE,
    BENCH_BAD_REQUEST,
    BENCH_FORBIDDEN,
    BENCH_SERVICE_UNAVAILABLE,
    BENCH_BATCHED_OK,
    BENCH_NSTATUS
} bench_status_t;

const char *bench_op_name(bench_op_t op);
const char *bench_status_name(bench_status_t st);
static inline bool bench_status_ok(bench_status_t st) { return st == BENCH_OK || st == BENCH_BATCHED_OK; }

#define BENCH_HIST_LINEAR 256 /* values below are exact */
#define BENCH_HIST_SUB 128    /* sub-buckets per power of two above */
#define BENCH_HIST_MAXEXP 41  /* values up to 2^41 us (25 days); larger are clamped */
#define BENCH_HIST_BUCKETS (BENCH_HIST_LINEAR + (BENCH_HIST_MAXEXP - 8) * BENCH_HIST_SUB)

/* A single-writer histogram of microsecond values. */
typedef struct bench_hist {
    _Atomic uint64_t counts[BENCH_HIST_BUCKETS];
    _Atomic uint64_t total, sum, min, max;
} bench_hist_t;

/* A private copy (merge target) of one or more histograms. */
typedef struct bench_hsnap {
    uint64_t counts[BENCH_HIST_BUCKETS];
    uint64_t total, sum, min, max;
} bench_hsnap_t;

int bench_hist_index(uint64_t v);
/* Lowest and highest values that fall in bucket i. */
uint64_t bench_hist_bucket_low(int i);
uint64_t bench_hist_bucket_high(int i);

void bench_hsnap_clear(bench_hsnap_t *s);
void bench_hsnap_record(bench_hsnap_t *s, uint64_t v);
/* s += the current contents of h. */
void bench_hsnap_add(bench_hsnap_t *s, const bench_hist_t *h);
/* out = cur - prev (an interval); min/max come from the buckets. */
void bench_hsnap_diff(bench_hsnap_t *out, const bench_hsnap_t *cur, const bench_hsnap_t *prev);
/* HdrHistogram's getValueAtPercentile: the highest value equivalent to the bucket
 * holding the ceil-rounded rank; 0 for an empty histogram. */
uint64_t bench_hsnap_percentile(const bench_hsnap_t *s, double pct);
double bench_hsnap_mean(const bench_hsnap_t *s);

/* One series per (operation, failed?, intended-latency?). */
#define BENCH_NSERIES (BENCH_NOPS * 4)
static inline int bench_series(bench_op_t op, bool failed, bool intended)
{
    return (int)op * 4 + (failed ? 2 : 0) + (intended ? 1 : 0);
}

/* One client thread's measurements. */
typedef struct bench_stats {
    _Atomic(bench_hist_t *) hist[BENCH_NSERIES]; /* allocated by the owner on first use */
    _Atomic uint64_t status[BENCH_NOPS][BENCH_NSTATUS];
    _Atomic uint64_t opsdone;
} bench_stats_t;

/* Which latencies are kept: YCSB's measurement.interval (op, intended, both). */
typedef enum bench_interval { BENCH_INTERVAL_OP, BENCH_INTERVAL_INTENDED, BENCH_INTERVAL_BOTH } bench_interval_t;

/* Returns a zeroed stats block or NULL; free with bench_stats_free. */
bench_stats_t *bench_stats_new(void);
void bench_stats_free(bench_stats_t *st);

/*
 * Record one operation: its service latency (end - start) and intended
 * latency (end - intended start, YCSB's measure without coordinated
 * omission), its status, under op or op-FAILED.  status BENCH_NSTATUS records
 * latency only (YCSB does so for READ-MODIFY-WRITE and CLEANUP).  Only the
 * owner calls this.
 * Returns 0, or -1 when a histogram could not be allocated.
 */
int bench_stats_record(bench_stats_t *st, bench_interval_t mode, bench_op_t op, bench_status_t status,
                       uint64_t latency_us, uint64_t intended_us);
/* Count a finished doInsert/doTransaction (the unit of YCSB's ops/sec). */
static inline void bench_stats_done(bench_stats_t *st)
{
    atomic_store_explicit(&st->opsdone, atomic_load_explicit(&st->opsdone, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* Merged view of all threads. */
typedef struct bench_report {
    bench_hsnap_t *series[BENCH_NSERIES]; /* NULL when no thread used the series */
    uint64_t status[BENCH_NOPS][BENCH_NSTATUS];
    bool op_seen[BENCH_NOPS];
    uint64_t opsdone;
} bench_report_t;

/* Merge nthreads stats into r (r is cleared first).  Returns 0 or -1 (out of memory). */
int bench_report_collect(bench_report_t *r, bench_stats_t *const *stats, int nthreads);
void bench_report_free(bench_report_t *r);
/* Number of operations with a status other than OK/BATCHED_OK. */
uint64_t bench_report_errors(const bench_report_t *r);

/* Java's Double.toString for the values YCSB prints ("4602.0", "422.68642584812034", "NaN"). */
void bench_java_double(char *buf, size_t cap, double v);
/* java.text.DecimalFormat("#.##") (HALF_EVEN). */
void bench_decimal2(char *buf, size_t cap, double v);

typedef struct bench_summary_info {
    uint64_t runtime_ms;
    double cpu_ms;            /* client user+system CPU, or < 0 to omit */
    const double *percentiles; /* hdrhistogram.percentiles */
    int npercentiles;
    bench_interval_t mode;
} bench_summary_info_t;

/* Print the final summary exactly in YCSB's TextMeasurementsExporter format. */
void bench_report_print(FILE *out, const bench_report_t *r, const bench_summary_info_t *info);

/*
 * The status thread's view: previous totals, so each line shows the last
 * interval (YCSB's getSummary resets its interval histogram on each call).
 */
typedef struct bench_status_line {
    bench_report_t prev;
    uint64_t prev_ops;
    uint64_t prev_ms;
} bench_status_line_t;

/*
 * Format YCSB's status line: "<date> <sec> sec: <n> operations; <x> current
 * ops/sec; [est completion in ...] [READ: Count=..., ...] ...".  elapsed_ms
 * is since the start, todo_ops the operations left (0 = unknown).
 * Returns 0 or -1 (out of memory).
 */
int bench_status_format(bench_status_line_t *sl, char *buf, size_t cap, bench_stats_t *const *stats,
                        int nthreads, uint64_t elapsed_ms, uint64_t total_ops_planned,
                        bench_interval_t mode);
void bench_status_line_free(bench_status_line_t *sl);

/* YCSB's RemainingFormatter ("1 hour 2 minutes ", "42 seconds "). */
void bench_remaining(char *buf, size_t cap, uint64_t seconds);

#endif
