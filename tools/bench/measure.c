/*
 * measure.c: single-writer log-linear histograms, their merge, and YCSB's
 * summary and status-line formats (see measure.h for the threading rules).
 *
 * Must stay true: the owner thread never takes a lock or does an atomic
 * read-modify-write when recording; output text matches YCSB 0.17's
 * hdrhistogram measurement byte for byte where the quantities are the same.
 */
#include "measure.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const op_names[BENCH_NOPS] = {
    "INSERT", "READ", "UPDATE", "SCAN", "READ-MODIFY-WRITE", "DELETE", "CLEANUP",
};

static const char *const status_names[BENCH_NSTATUS] = {
    "OK",        "ERROR",     "NOT_FOUND",           "NOT_IMPLEMENTED", "UNEXPECTED_STATE",
    "BAD_REQUEST", "FORBIDDEN", "SERVICE_UNAVAILABLE", "BATCHED_OK",
};

const char *bench_op_name(bench_op_t op) { return op < BENCH_NOPS ? op_names[op] : "?"; }
const char *bench_status_name(bench_status_t st) { return st < BENCH_NSTATUS ? status_names[st] : "?"; }

int bench_hist_index(uint64_t v)
{
    if (v < BENCH_HIST_LINEAR)
        return (int)v;
    int k = 63 - __builtin_clzll(v);
    if (k >= BENCH_HIST_MAXEXP)
        return BENCH_HIST_BUCKETS - 1;
    int sub = (int)(v >> (k - 7)) - BENCH_HIST_SUB;
    return BENCH_HIST_LINEAR + (k - 8) * BENCH_HIST_SUB + sub;
}

uint64_t bench_hist_bucket_low(int i)
{
    if (i < BENCH_HIST_LINEAR)
        return (uint64_t)i;
    int j = i - BENCH_HIST_LINEAR;
    int k = 8 + j / BENCH_HIST_SUB;
    return (uint64_t)(BENCH_HIST_SUB + j % BENCH_HIST_SUB) << (k - 7);
}

uint64_t bench_hist_bucket_high(int i)
{
    if (i < BENCH_HIST_LINEAR)
        return (uint64_t)i;
    int k = 8 + (i - BENCH_HIST_LINEAR) / BENCH_HIST_SUB;
    return bench_hist_bucket_low(i) + ((uint64_t)1 << (k - 7)) - 1;
}

void bench_hsnap_clear(bench_hsnap_t *s)
{
    memset(s, 0, sizeof(*s));
    s->min = UINT64_MAX;
}

void bench_hsnap_record(bench_hsnap_t *s, uint64_t v)
{
    s->counts[bench_hist_index(v)]++;
    s->total++;
    s->sum += v;
    if (v < s->min)
        s->min = v;
    if (v > s->max)
        s->max = v;
}

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)
#define BUMP(x, d) atomic_store_explicit(&(x), LOAD(x) + (d), memory_order_relaxed)

void bench_hsnap_add(bench_hsnap_t *s, const bench_hist_t *h)
{
    bench_hist_t *hh = (bench_hist_t *)h;
    for (int i = 0; i < BENCH_HIST_BUCKETS; i++)
        s->counts[i] += LOAD(hh->counts[i]);
    s->total += LOAD(hh->total);
    s->sum += LOAD(hh->sum);
    uint64_t mn = LOAD(hh->min), mx = LOAD(hh->max);
    if (mn < s->min)
        s->min = mn;
    if (mx > s->max)
        s->max = mx;
}

void bench_hsnap_diff(bench_hsnap_t *out, const bench_hsnap_t *cur, const bench_hsnap_t *prev)
{
    bench_hsnap_clear(out);
    int first = -1, last = -1;
    for (int i = 0; i < BENCH_HIST_BUCKETS; i++) {
        uint64_t c = cur->counts[i] - (prev ? prev->counts[i] : 0);
        if (c > cur->counts[i]) /* a torn concurrent read; never negative */
            c = 0;
        out->counts[i] = c;
        out->total += c;
        if (c) {
            if (first < 0)
                first = i;
            last = i;
        }
    }
    out->sum = cur->sum - (prev ? prev->sum : 0);
    if (first >= 0) {
        out->min = bench_hist_bucket_low(first);
        out->max = bench_hist_bucket_high(last);
        if (out->max > cur->max)
            out->max = cur->max;
        if (out->min < cur->min)
            out->min = cur->min;
    }
}

uint64_t bench_hsnap_percentile(const bench_hsnap_t *s, double pct)
{
    if (s->total == 0)
        return 0;
    if (pct > 100.0)
        pct = 100.0;
    uint64_t rank = (uint64_t)(pct / 100.0 * (double)s->total + 0.5);
    if (rank < 1)
        rank = 1;
    uint64_t seen = 0;
    for (int i = 0; i < BENCH_HIST_BUCKETS; i++) {
        seen += s->counts[i];
        if (seen >= rank) {
            uint64_t v = bench_hist_bucket_high(i);
            if (v > s->max)
                v = s->max; /* never report above the true maximum */
            if (v < s->min)
                v = s->min;
            return v;
        }
    }
    return s->max;
}

double bench_hsnap_mean(const bench_hsnap_t *s)
{
    return s->total ? (double)s->sum / (double)s->total : 0.0;
}

bench_stats_t *bench_stats_new(void) { return calloc(1, sizeof(bench_stats_t)); }

void bench_stats_free(bench_stats_t *st)
{
    if (st == NULL)
        return;
    for (int i = 0; i < BENCH_NSERIES; i++)
        free(atomic_load(&st->hist[i]));
    free(st);
}

static bench_hist_t *stats_hist(bench_stats_t *st, int series)
{
    bench_hist_t *h = atomic_load_explicit(&st->hist[series], memory_order_relaxed);
    if (h == NULL) {
        h = calloc(1, sizeof(*h));
        if (h == NULL)
            return NULL;
        atomic_init(&h->min, UINT64_MAX);
        atomic_store_explicit(&st->hist[series], h, memory_order_release);
    }
    return h;
}

static void hist_record(bench_hist_t *h, uint64_t v)
{
    BUMP(h->counts[bench_hist_index(v)], 1);
    BUMP(h->total, 1);
    BUMP(h->sum, v);
    if (v < LOAD(h->min))
        atomic_store_explicit(&h->min, v, memory_order_relaxed);
    if (v > LOAD(h->max))
        atomic_store_explicit(&h->max, v, memory_order_relaxed);
}

int bench_stats_record(bench_stats_t *st, bench_interval_t mode, bench_op_t op, bench_status_t status,
                       uint64_t latency_us, uint64_t intended_us)
{
    bool failed = false;
    if (status != BENCH_NSTATUS) {
        failed = !bench_status_ok(status);
        BUMP(st->status[op][status], 1);
    }
    if (mode != BENCH_INTERVAL_INTENDED) {
        bench_hist_t *h = stats_hist(st, bench_series(op, failed, false));
        if (h == NULL)
            return -1;
        hist_record(h, latency_us);
    }
    if (mode != BENCH_INTERVAL_OP) {
        bench_hist_t *h = stats_hist(st, bench_series(op, failed, true));
        if (h == NULL)
            return -1;
        hist_record(h, intended_us);
    }
    return 0;
}

int bench_report_collect(bench_report_t *r, bench_stats_t *const *stats, int nthreads)
{
    for (int s = 0; s < BENCH_NSERIES; s++)
        if (r->series[s])
            bench_hsnap_clear(r->series[s]);
    memset(r->status, 0, sizeof(r->status));
    memset(r->op_seen, 0, sizeof(r->op_seen));
    r->opsdone = 0;
    for (int t = 0; t < nthreads; t++) {
        bench_stats_t *st = stats[t];
        r->opsdone += LOAD(st->opsdone);
        for (int op = 0; op < BENCH_NOPS; op++)
            for (int k = 0; k < BENCH_NSTATUS; k++) {
                uint64_t c = LOAD(st->status[op][k]);
                r->status[op][k] += c;
                if (c)
                    r->op_seen[op] = true;
            }
        for (int s = 0; s < BENCH_NSERIES; s++) {
            bench_hist_t *h = atomic_load_explicit(&st->hist[s], memory_order_acquire);
            if (h == NULL)
                continue;
            if (r->series[s] == NULL) {
                r->series[s] = malloc(sizeof(bench_hsnap_t));
                if (r->series[s] == NULL)
                    return -1;
                bench_hsnap_clear(r->series[s]);
            }
            bench_hsnap_add(r->series[s], h);
            r->op_seen[s / 4] = true;
        }
    }
    return 0;
}

void bench_report_free(bench_report_t *r)
{
    for (int s = 0; s < BENCH_NSERIES; s++) {
        free(r->series[s]);
        r->series[s] = NULL;
    }
}

uint64_t bench_report_errors(const bench_report_t *r)
{
    uint64_t n = 0;
    for (int op = 0; op < BENCH_NOPS; op++)
        for (int k = 0; k < BENCH_NSTATUS; k++)
            if (!bench_status_ok((bench_status_t)k))
                n += r->status[op][k];
    return n;
}

void bench_java_double(char *buf, size_t cap, double v)
{
    if (isnan(v)) {
        snprintf(buf, cap, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, cap, v > 0 ? "Infinity" : "-Infinity");
        return;
    }
    if (v == 0) {
        snprintf(buf, cap, signbit(v) ? "-0.0" : "0.0");
        return;
    }
    /* Shortest digit string that reads back as v, as Java prints it. */
    char e[64];
    int prec;
    for (prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec, v);
        if (strtod(e, NULL) == v)
            break;
    }
    char digits[32];
    int nd = 0;
    const char *p = e;
    bool neg = false;
    if (*p == '-') {
        neg = true;
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    double a = fabs(v);
    char out[64];
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (a >= 1e-3 && a < 1e7) {
        if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++)
                out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > exp10 + 1)
                for (int i = exp10 + 1; i < nd; i++)
                    out[o++] = digits[i];
            else
                out[o++] = '0';
        } else {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -exp10 - 1; i++)
                out[o++] = '0';
            for (int i = 0; i < nd; i++)
                out[o++] = digits[i];
        }
        out[o] = '\0';
    } else {
        out[o++] = digits[0];
        out[o++] = '.';
        if (nd > 1)
            for (int i = 1; i < nd; i++)
                out[o++] = digits[i];
        else
            out[o++] = '0';
        snprintf(out + o, sizeof(out) - o, "E%d", exp10);
    }
    snprintf(buf, cap, "%s", out);
}

void bench_decimal2(char *buf, size_t cap, double v)
{
    if (isnan(v)) {
        snprintf(buf, cap, "NaN");
        return;
    }
    /* HALF_EVEN at two decimals: rint rounds ties to even in the default mode. */
    double r = rint(v * 100.0) / 100.0;
    char tmp[64];
    snprintf(tmp, sizeof(tmp), "%.2f", r);
    char *dot = strchr(tmp, '.');
    if (dot) {
        char *end = tmp + strlen(tmp) - 1;
        while (end > dot && *end == '0')
            *end-- = '\0';
        if (end == dot)
            *end = '\0';
    }
    if (strcmp(tmp, "-0") == 0)
        snprintf(tmp, sizeof(tmp), "0");
    snprintf(buf, cap, "%s", tmp);
}

static void print_ordinal(FILE *out, double pct)
{
    char num[32];
    if (pct == floor(pct))
        snprintf(num, sizeof(num), "%.0f", pct);
    else
        snprintf(num, sizeof(num), "%g", pct);
    /* YCSB's ordinal(): 11-13 take "th", otherwise by the last digit. */
    const char *suffix = "th";
    if (pct == floor(pct)) {
        long n = (long)pct;
        long mod100 = n % 100, mod10 = n % 10;
        if (mod100 < 11 || mod100 > 13) {
            if (mod10 == 1)
                suffix = "st";
            else if (mod10 == 2)
                suffix = "nd";
            else if (mod10 == 3)
                suffix = "rd";
        }
    }
    fprintf(out, "%s%sPercentileLatency(us), ", num, suffix);
}

static void print_series(FILE *out, const char *name, const bench_hsnap_t *s, const bench_summary_info_t *info)
{
    static const bench_hsnap_t empty = {.min = 0};
    if (s == NULL)
        s = &empty;
    char d[64];
    fprintf(out, "[%s], Operations, %" PRIu64 "\n", name, s->total);
    bench_java_double(d, sizeof(d), s->total ? bench_hsnap_mean(s) : NAN);
    fprintf(out, "[%s], AverageLatency(us), %s\n", name, d);
    fprintf(out, "[%s], MinLatency(us), %" PRIu64 "\n", name, s->total ? s->min : 0);
    fprintf(out, "[%s], MaxLatency(us), %" PRIu64 "\n", name, s->max);
    for (int i = 0; i < info->npercentiles; i++) {
        fprintf(out, "[%s], ", name);
        print_ordinal(out, info->percentiles[i]);
        fprintf(out, "%" PRIu64 "\n", bench_hsnap_percentile(s, info->percentiles[i]));
    }
}

void bench_report_print(FILE *out, const bench_report_t *r, const bench_summary_info_t *info)
{
    char d[64];
    uint64_t ms = info->runtime_ms ? info->runtime_ms : 1;
    fprintf(out, "[OVERALL], RunTime(ms), %" PRIu64 "\n", info->runtime_ms);
    bench_java_double(d, sizeof(d), 1000.0 * (double)r->opsdone / (double)ms);
    fprintf(out, "[OVERALL], Throughput(ops/sec), %s\n", d);
    if (info->cpu_ms >= 0) {
        bench_java_double(d, sizeof(d), info->cpu_ms);
        fprintf(out, "[CLIENT], CPUTime(ms), %s\n", d);
        bench_java_double(d, sizeof(d), r->opsdone ? info->cpu_ms * 1000.0 / (double)r->opsdone : 0.0);
        fprintf(out, "[CLIENT], CPUTimePerOp(us), %s\n", d);
    }
    for (int op = 0; op < BENCH_NOPS; op++) {
        if (!r->op_seen[op])
            continue;
        const char *name = bench_op_name((bench_op_t)op);
        char iname[64], fname[64], ifname[64];
        snprintf(iname, sizeof(iname), "Intended-%s", name);
        snprintf(fname, sizeof(fname), "%s-FAILED", name);
        snprintf(ifname, sizeof(ifname), "Intended-%s-FAILED", name);
        bool intended_only = info->mode == BENCH_INTERVAL_INTENDED;
        print_series(out, intended_only ? iname : name,
                     r->series[bench_series((bench_op_t)op, false, intended_only)], info);
        for (int k = 0; k < BENCH_NSTATUS; k++)
            if (r->status[op][k])
                fprintf(out, "[%s], Return=%s, %" PRIu64 "\n", name, bench_status_name((bench_status_t)k),
                        r->status[op][k]);
        if (info->mode == BENCH_INTERVAL_BOTH && r->series[bench_series((bench_op_t)op, false, true)])
            print_series(out, iname, r->series[bench_series((bench_op_t)op, false, true)], info);
        if (r->series[bench_series((bench_op_t)op, true, false)])
            print_series(out, fname, r->series[bench_series((bench_op_t)op, true, false)], info);
        if (r->series[bench_series((bench_op_t)op, true, true)])
            print_series(out, ifname, r->series[bench_series((bench_op_t)op, true, true)], info);
    }
    fflush(out);
}

void bench_remaining(char *buf, size_t cap, uint64_t seconds)
{
    size_t o = 0;
    buf[0] = '\0';
    uint64_t days = seconds / 86400;
    if (days > 0) {
        o += (size_t)snprintf(buf + o, cap - o, "%" PRIu64 " %s", days, days == 1 ? "day " : "days ");
        seconds -= days * 86400;
    }
    uint64_t hours = seconds / 3600;
    if (hours > 0 && o < cap) {
        o += (size_t)snprintf(buf + o, cap - o, "%" PRIu64 " %s", hours, hours == 1 ? "hour " : "hours ");
        seconds -= hours * 3600;
    }
    if (days < 1 && o < cap) {
        uint64_t minutes = seconds / 60;
        if (minutes > 0) {
            o += (size_t)snprintf(buf + o, cap - o, "%" PRIu64 " %s", minutes,
                                  minutes == 1 ? "minute " : "minutes ");
            seconds -= minutes * 60;
        }
    }
    if (o == 0)
        snprintf(buf, cap, "%" PRIu64 " seconds ", seconds);
}

static size_t append(char *buf, size_t cap, size_t o, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static size_t append(char *buf, size_t cap, size_t o, const char *fmt, ...)
{
    if (o >= cap)
        return o;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + o, cap - o, fmt, ap);
    va_end(ap);
    return n > 0 ? o + (size_t)n : o;
}

int bench_status_format(bench_status_line_t *sl, char *buf, size_t cap, bench_stats_t *const *stats,
                        int nthreads, uint64_t elapsed_ms, uint64_t total_ops_planned,
                        bench_interval_t mode)
{
    bench_report_t cur;
    memset(&cur, 0, sizeof(cur));
    if (bench_report_collect(&cur, stats, nthreads) != 0) {
        bench_report_free(&cur);
        return -1;
    }
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char date[64];
    strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S", &tm);
    size_t o = 0;
    o = append(buf, cap, o, "%s:%03ld %" PRIu64 " sec: %" PRIu64 " operations; ", date, ts.tv_nsec / 1000000,
               elapsed_ms / 1000, cur.opsdone);
    char d[64];
    if (cur.opsdone != 0) {
        uint64_t dt = elapsed_ms - sl->prev_ms;
        bench_decimal2(d, sizeof(d), dt ? 1000.0 * (double)(cur.opsdone - sl->prev_ops) / (double)dt : 0.0);
        o = append(buf, cap, o, "%s current ops/sec; ", d);
    }
    if (total_ops_planned != 0 && cur.opsdone < total_ops_planned && cur.opsdone > 0 && elapsed_ms > 0) {
        double rate = 1000.0 * (double)cur.opsdone / (double)elapsed_ms;
        char rem[128];
        bench_remaining(rem, sizeof(rem), (uint64_t)ceil((double)(total_ops_planned - cur.opsdone) / rate));
        o = append(buf, cap, o, "est completion in %s", rem);
    }
    for (int op = 0; op < BENCH_NOPS; op++) {
        for (int v = 0; v < 4; v++) {
            int s = op * 4 + v;
            if (cur.series[s] == NULL)
                continue;
            bool failed = v & 2, intended = v & 1;
            if (intended && mode == BENCH_INTERVAL_OP)
                continue;
            bench_hsnap_t iv;
            bench_hsnap_diff(&iv, cur.series[s], sl->prev.series[s]);
            o = append(buf, cap, o, "[%s%s%s: Count=%" PRIu64 ", Max=%" PRIu64 ", Min=%" PRIu64 ", Avg=",
                       intended ? "Intended-" : "", bench_op_name((bench_op_t)op), failed ? "-FAILED" : "",
                       iv.total, iv.total ? iv.max : 0, iv.total ? iv.min : 0);
            bench_decimal2(d, sizeof(d), bench_hsnap_mean(&iv));
            o = append(buf, cap, o, "%s, 90=%" PRIu64 ", 99=%" PRIu64 ", 99.9=%" PRIu64 ", 99.99=%" PRIu64 "] ",
                       d, bench_hsnap_percentile(&iv, 90), bench_hsnap_percentile(&iv, 99),
                       bench_hsnap_percentile(&iv, 99.9), bench_hsnap_percentile(&iv, 99.99));
        }
    }
    bench_report_free(&sl->prev);
    sl->prev = cur;
    sl->prev_ops = cur.opsdone;
    sl->prev_ms = elapsed_ms;
    return 0;
}

void bench_status_line_free(bench_status_line_t *sl) { bench_report_free(&sl->prev); }
