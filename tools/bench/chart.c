/*
 * chart.c: sable-bench --chart (chart.h).  Points are taken by the status
 * thread; after the run they are written to a temporary data file next to a
 * gnuplot script, and gnuplot (Debian's gnuplot-nox, pngcairo terminal)
 * turns them into the PNG.
 */
#include "chart.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int bench_chart_add(bench_chart_t *c, const bench_chart_point_t *p)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        bench_chart_point_t *np = realloc(c->points, cap * sizeof(*np));
        if (np == NULL)
            return -1;
        c->points = np;
        c->cap = cap;
    }
    c->points[c->n++] = *p;
    return 0;
}

int bench_chart_sample(bench_chart_t *c, bench_stats_t *const *stats, int nthreads, uint64_t elapsed_ms)
{
    bench_report_t cur;
    memset(&cur, 0, sizeof(cur));
    if (bench_report_collect(&cur, stats, nthreads) != 0) {
        bench_report_free(&cur);
        return -1;
    }
    bench_chart_point_t p;
    uint64_t dt = elapsed_ms - c->prev_ms;
    p.t_s = (double)elapsed_ms / 1000.0;
    p.ops_per_s = dt > 0 ? 1000.0 * (double)(cur.opsdone - c->prev_ops) / (double)dt : 0.0;
    for (int op = 0; op < BENCH_NOPS; op++) {
        int s = bench_series((bench_op_t)op, false, false);
        p.avg_ms[op] = p.p99_ms[op] = NAN;
        if (op == BENCH_OP_CLEANUP || cur.series[s] == NULL)
            continue;
        bench_hsnap_t *iv = malloc(sizeof(*iv));
        if (iv == NULL)
            continue;
        bench_hsnap_diff(iv, cur.series[s], c->prev.series[s]);
        if (iv->total > 0) {
            p.avg_ms[op] = bench_hsnap_mean(iv) / 1000.0;
            p.p99_ms[op] = (double)bench_hsnap_percentile(iv, 99) / 1000.0;
        }
        free(iv);
    }
    bench_report_free(&c->prev);
    c->prev = cur;
    c->prev_ops = cur.opsdone;
    c->prev_ms = elapsed_ms;
    if (dt == 0)
        return 0;
    return bench_chart_add(c, &p);
}

void bench_chart_free(bench_chart_t *c)
{
    free(c->points);
    bench_report_free(&c->prev);
    memset(c, 0, sizeof(*c));
}

/* gnuplot's single-quoted string: a quote is doubled. */
static void put_quoted(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

static int run_gnuplot(const char *script, char *err, size_t errlen)
{
    pid_t pid;
    char *argv[] = {"gnuplot", (char *)script, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    int rc = posix_spawnp(&pid, "gnuplot", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        snprintf(err, errlen, "cannot run gnuplot: %s (Debian: gnuplot-nox)", strerror(rc));
        return -1;
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(err, errlen, "gnuplot failed (exit status %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return -1;
    }
    return 0;
}

int bench_chart_write(const bench_chart_t *c, const char *path, const char *title, char *err, size_t errlen)
{
    char data[] = "/tmp/sable-bench-chart-XXXXXX";
    char script[] = "/tmp/sable-bench-plot-XXXXXX";
    int rc = -1, dfd = -1, sfd = -1;
    FILE *df = NULL, *sf = NULL;
    bool used[BENCH_NOPS] = {false};
    int nused = 0;

    if (c->n == 0) {
        snprintf(err, errlen, "no points (the run was shorter than one status interval)");
        return -1;
    }
    for (size_t i = 0; i < c->n; i++)
        for (int op = 0; op < BENCH_NOPS; op++)
            if (!isnan(c->points[i].avg_ms[op]) && !used[op]) {
                used[op] = true;
                nused++;
            }
    if ((dfd = mkstemp(data)) < 0 || (sfd = mkstemp(script)) < 0 ||
        (df = fdopen(dfd, "w")) == NULL || (sf = fdopen(sfd, "w")) == NULL) {
        snprintf(err, errlen, "cannot write a temporary file: %s", strerror(errno));
        goto done;
    }
    dfd = sfd = -1;
    for (size_t i = 0; i < c->n; i++) {
        const bench_chart_point_t *p = &c->points[i];
        fprintf(df, "%.3f %.3f", p->t_s, p->ops_per_s);
        for (int op = 0; op < BENCH_NOPS; op++)
            if (used[op])
                fprintf(df, isnan(p->avg_ms[op]) ? " NaN NaN" : " %.4f %.4f", p->avg_ms[op], p->p99_ms[op]);
        fputc('\n', df);
    }
    fprintf(sf, "set terminal pngcairo size 1000,720 font 'sans,10'\nset output ");
    put_quoted(sf, path);
    fprintf(sf, "\nset multiplot layout 2,1 title ");
    put_quoted(sf, title);
    fprintf(sf, "\nset grid\nset key outside right top\nset lmargin 12\nset rmargin 28\n"
                "set xrange [0:%.3f]\nset yrange [0:*]\n"
                "set ylabel 'operations/s'\nplot ",
            c->points[c->n - 1].t_s);
    put_quoted(sf, data);
    fprintf(sf, " using 1:2 with linespoints lw 2 pt 7 ps 0.6 title 'throughput'\n"
                "set xlabel 'seconds since the start'\nset ylabel 'latency (ms)'\nplot ");
    int col = 3, k = 0;
    for (int op = 0; op < BENCH_NOPS; op++) {
        if (!used[op])
            continue;
        if (k++ > 0)
            fprintf(sf, ", ");
        put_quoted(sf, data);
        fprintf(sf, " using 1:%d with linespoints lc %d lw 2 pt 7 ps 0.5 title '%s mean', ", col, k,
                bench_op_name((bench_op_t)op));
        put_quoted(sf, data);
        fprintf(sf, " using 1:%d with linespoints lc %d dt 2 pt 6 ps 0.5 title '%s p99'", col + 1, k,
                bench_op_name((bench_op_t)op));
        col += 2;
    }
    if (nused == 0)
        fprintf(sf, "NaN notitle");
    fprintf(sf, "\nunset multiplot\n");
    if (fclose(df) != 0 || fclose(sf) != 0) {
        df = sf = NULL;
        snprintf(err, errlen, "cannot write a temporary file: %s", strerror(errno));
        goto done;
    }
    df = sf = NULL;
    rc = run_gnuplot(script, err, errlen);
done:
    if (df != NULL)
        fclose(df);
    if (sf != NULL)
        fclose(sf);
    if (dfd >= 0)
        close(dfd);
    if (sfd >= 0)
        close(sfd);
    unlink(data);
    unlink(script);
    return rc;
}
