/*
 * test_bench_measure.c: sable-bench's histograms and output: bucket error
 * within 1%, HdrHistogram's percentile rule, per-thread merge, and the
 * exact text of YCSB's summary and status lines.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "measure.h"

static void test_buckets(void)
{
    bool ok = true, mono = true;
    int prev = -1;
    for (uint64_t v = 0; v < 5000000; v += (v < 1000 ? 1 : v / 97)) {
        int i = bench_hist_index(v);
        uint64_t lo = bench_hist_bucket_low(i), hi = bench_hist_bucket_high(i);
        if (v < lo || v > hi || (double)(hi - lo) > 0.01 * (double)lo)
            ok = false;
        if (i < prev)
            mono = false;
        prev = i;
    }
    CHECK_MSG(ok, "bucket bounds or width beyond 1%%");
    CHECK(mono);
    CHECK(bench_hist_index(0) == 0 && bench_hist_index(255) == 255);
    CHECK(bench_hist_bucket_low(bench_hist_index(256)) == 256);
    CHECK(bench_hist_index(UINT64_MAX) == BENCH_HIST_BUCKETS - 1);
}

static void test_percentiles(void)
{
    bench_hsnap_t s;
    bench_hsnap_clear(&s);
    CHECK(bench_hsnap_percentile(&s, 99) == 0);
    for (uint64_t v = 1; v <= 100; v++)
        bench_hsnap_record(&s, v);
    CHECK(bench_hsnap_percentile(&s, 50) == 50);
    CHECK(bench_hsnap_percentile(&s, 95) == 95);
    CHECK(bench_hsnap_percentile(&s, 99) == 99);
    CHECK(bench_hsnap_percentile(&s, 100) == 100);
    CHECK(bench_hsnap_mean(&s) == 50.5);
    CHECK(s.min == 1 && s.max == 100);
    bench_hsnap_clear(&s);
    for (int i = 0; i < 1000; i++)
        bench_hsnap_record(&s, 10000 + (uint64_t)i * 100);
    uint64_t p99 = bench_hsnap_percentile(&s, 99), exact = 10000 + 989 * 100;
    CHECK_MSG(fabs((double)p99 - (double)exact) <= 0.01 * (double)exact, "p99 %llu", (unsigned long long)p99);
    CHECK(bench_hsnap_percentile(&s, 100) == s.max);
}

static void test_stats_merge(void)
{
    bench_stats_t *a = bench_stats_new(), *b = bench_stats_new();
    CHECK(a && b);
    for (int i = 0; i < 10; i++)
        bench_stats_record(a, BENCH_INTERVAL_OP, BENCH_OP_READ, BENCH_OK, 100, 100);
    bench_stats_record(b, BENCH_INTERVAL_OP, BENCH_OP_READ, BENCH_OK, 300, 300);
    bench_stats_record(b, BENCH_INTERVAL_OP, BENCH_OP_READ, BENCH_NOT_FOUND, 50, 50);
    bench_stats_record(b, BENCH_INTERVAL_OP, BENCH_OP_UPDATE, BENCH_ERROR, 70, 70);
    bench_stats_record(b, BENCH_INTERVAL_OP, BENCH_OP_CLEANUP, BENCH_NSTATUS, 5, 5);
    for (int i = 0; i < 13; i++)
        bench_stats_done(i % 2 ? a : b);
    bench_stats_t *all[2] = {a, b};
    bench_report_t r;
    memset(&r, 0, sizeof(r));
    CHECK(bench_report_collect(&r, all, 2) == 0);
    CHECK(r.opsdone == 13);
    bench_hsnap_t *rd = r.series[bench_series(BENCH_OP_READ, false, false)];
    CHECK(rd && rd->total == 11 && rd->max == 300 && rd->min == 100);
    CHECK(r.series[bench_series(BENCH_OP_READ, true, false)]->total == 1);
    CHECK(r.series[bench_series(BENCH_OP_READ, false, true)] == NULL); /* op mode keeps no intended series */
    CHECK(r.status[BENCH_OP_READ][BENCH_OK] == 11 && r.status[BENCH_OP_READ][BENCH_NOT_FOUND] == 1);
    CHECK(r.status[BENCH_OP_CLEANUP][BENCH_OK] == 0);
    CHECK(bench_report_errors(&r) == 2);

    double pcts[] = {95, 99};
    bench_summary_info_t info = {.runtime_ms = 2000, .cpu_ms = -1, .percentiles = pcts, .npercentiles = 2,
                                 .mode = BENCH_INTERVAL_OP};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    bench_report_print(f, &r, &info);
    fclose(f);
    const char *want = "[OVERALL], RunTime(ms), 2000\n"
                       "[OVERALL], Throughput(ops/sec), 6.5\n"
                       "[READ], Operations, 11\n"
                       "[READ], AverageLatency(us), 118.18181818181819\n"
                       "[READ], MinLatency(us), 100\n"
                       "[READ], MaxLatency(us), 300\n"
                       "[READ], 95thPercentileLatency(us), 100\n"
                       "[READ], 99thPercentileLatency(us), 300\n"
                       "[READ], Return=OK, 11\n"
                       "[READ], Return=NOT_FOUND, 1\n"
                       "[READ-FAILED], Operations, 1\n"
                       "[READ-FAILED], AverageLatency(us), 50.0\n"
                       "[READ-FAILED], MinLatency(us), 50\n"
                       "[READ-FAILED], MaxLatency(us), 50\n"
                       "[READ-FAILED], 95thPercentileLatency(us), 50\n"
                       "[READ-FAILED], 99thPercentileLatency(us), 50\n"
                       "[UPDATE], Operations, 0\n"
                       "[UPDATE], AverageLatency(us), NaN\n"
                       "[UPDATE], MinLatency(us), 0\n"
                       "[UPDATE], MaxLatency(us), 0\n"
                       "[UPDATE], 95thPercentileLatency(us), 0\n"
                       "[UPDATE], 99thPercentileLatency(us), 0\n"
                       "[UPDATE], Return=ERROR, 1\n"
                       "[UPDATE-FAILED], Operations, 1\n"
                       "[UPDATE-FAILED], AverageLatency(us), 70.0\n"
                       "[UPDATE-FAILED], MinLatency(us), 70\n"
                       "[UPDATE-FAILED], MaxLatency(us), 70\n"
                       "[UPDATE-FAILED], 95thPercentileLatency(us), 70\n"
                       "[UPDATE-FAILED], 99thPercentileLatency(us), 70\n"
                       "[CLEANUP], Operations, 1\n"
                       "[CLEANUP], AverageLatency(us), 5.0\n"
                       "[CLEANUP], MinLatency(us), 5\n"
                       "[CLEANUP], MaxLatency(us), 5\n"
                       "[CLEANUP], 95thPercentileLatency(us), 5\n"
                       "[CLEANUP], 99thPercentileLatency(us), 5\n";
    CHECK_MSG(strcmp(buf, want) == 0, "summary was:\n%s", buf);
    free(buf);

    /* With CPU time and extra percentiles. */
    double p3[] = {50, 99.9};
    info.percentiles = p3;
    info.npercentiles = 2;
    info.cpu_ms = 13;
    f = open_memstream(&buf, &len);
    bench_report_print(f, &r, &info);
    fclose(f);
    CHECK(strstr(buf, "[CLIENT], CPUTimePerOp(us), 1000.0\n") != NULL);
    CHECK(strstr(buf, "[READ], 50thPercentileLatency(us), 100\n") != NULL);
    CHECK(strstr(buf, "[READ], 99.9thPercentileLatency(us), 300\n") != NULL);
    free(buf);

    /* Status line: YCSB's layout, interval counts. */
    bench_status_line_t sl;
    memset(&sl, 0, sizeof(sl));
    char line[4096];
    CHECK(bench_status_format(&sl, line, sizeof(line), all, 2, 10000, 100, BENCH_INTERVAL_OP) == 0);
    CHECK_MSG(strstr(line, " 10 sec: 13 operations; 1.3 current ops/sec; est completion in 1 minute 07 seconds") ||
                  strstr(line, " 10 sec: 13 operations; 1.3 current ops/sec; est completion in 1 minute [READ: "),
              "%s", line);
    CHECK(strstr(line, "[READ: Count=11, Max=300, Min=100, Avg=118.18, 90=100, 99=300, 99.9=300, 99.99=300] ") != NULL);
    CHECK(strstr(line, "[READ-FAILED: Count=1,") != NULL);
    CHECK(line[4] == '-' && line[7] == '-' && line[13] == ':' && line[19] == ':'); /* yyyy-MM-dd HH:mm:ss:SSS */
    bench_stats_record(a, BENCH_INTERVAL_OP, BENCH_OP_READ, BENCH_OK, 1000, 1000);
    CHECK(bench_status_format(&sl, line, sizeof(line), all, 2, 20000, 0, BENCH_INTERVAL_OP) == 0);
    CHECK_MSG(strstr(line, " 20 sec: 13 operations; 0 current ops/sec; [READ: Count=1, Max=1000, Min=1000, Avg=1000,") !=
                  NULL,
              "%s", line);
    bench_status_line_free(&sl);
    bench_report_free(&r);
    bench_stats_free(a);
    bench_stats_free(b);
}

static void test_formats(void)
{
    char b[64];
    bench_java_double(b, sizeof(b), 4602.0);
    CHECK(strcmp(b, "4602.0") == 0);
    bench_java_double(b, sizeof(b), 422.68642584812034);
    CHECK(strcmp(b, "422.68642584812034") == 0);
    bench_java_double(b, sizeof(b), 0.1);
    CHECK(strcmp(b, "0.1") == 0);
    bench_java_double(b, sizeof(b), 0.0012);
    CHECK(strcmp(b, "0.0012") == 0);
    bench_java_double(b, sizeof(b), 1.5e7);
    CHECK(strcmp(b, "1.5E7") == 0);
    bench_java_double(b, sizeof(b), 1e-4);
    CHECK(strcmp(b, "1.0E-4") == 0);
    bench_java_double(b, sizeof(b), NAN);
    CHECK(strcmp(b, "NaN") == 0);
    bench_java_double(b, sizeof(b), 0);
    CHECK(strcmp(b, "0.0") == 0);
    bench_java_double(b, sizeof(b), 1234567.0);
    CHECK(strcmp(b, "1234567.0") == 0);
    bench_decimal2(b, sizeof(b), 1234.5);
    CHECK(strcmp(b, "1234.5") == 0);
    bench_decimal2(b, sizeof(b), 12.0);
    CHECK(strcmp(b, "12") == 0);
    bench_decimal2(b, sizeof(b), 2.3456);
    CHECK(strcmp(b, "2.35") == 0);
    bench_remaining(b, sizeof(b), 42);
    CHECK(strcmp(b, "42 seconds ") == 0);
    bench_remaining(b, sizeof(b), 3720);
    CHECK(strcmp(b, "1 hour 2 minutes ") == 0);
    bench_remaining(b, sizeof(b), 90000);
    CHECK(strcmp(b, "1 day 1 hour ") == 0);
    CHECK(strcmp(bench_op_name(BENCH_OP_RMW), "READ-MODIFY-WRITE") == 0);
    CHECK(strcmp(bench_status_name(BENCH_BATCHED_OK), "BATCHED_OK") == 0 && bench_status_ok(BENCH_BATCHED_OK));
}

int main(void)
{
    test_buckets();
    test_percentiles();
    test_stats_merge();
    test_formats();
    return CHECK_DONE("test_bench_measure");
}
