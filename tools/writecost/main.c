/*
 * sable-writecost: what appending to a log file costs the whole machine, per
 * kilobyte, for one write size and one way of keeping the page cache.
 *
 * The audit log appends every event to a file and must hand it to the
 * kernel before the reply goes out, so its kernel work per byte is a floor
 * under what an audited operation can cost.  This program appends --mb
 * megabytes in writes of --size bytes, the way sabled does (O_APPEND, an
 * fdatasync every --sync-mb megabytes as the journal flusher does) or
 * another way, and prints the wall time and the machine's CPU time (every
 * CPU, from /proc/stat: user, system, interrupts, softirqs, steal; so
 * writeback and I/O completion count too) per kilobyte.  Run it on an
 * otherwise idle machine: other work counts as well.
 *
 *   sable-writecost [--dir DIR] [--mb N] [--size BYTES] [--sync-mb N]
 *                   [--policy buffered|drop|dontcache|direct]
 *
 * buffered:  write(2) and a periodic fdatasync;
 * drop:      the same, then POSIX_FADV_DONTNEED of what was synced (sabled's
 *            audit log since session 7);
 * dontcache: pwritev2 with RWF_DONTCACHE (the kernel writes back and drops
 *            each write's pages itself; Linux 6.14 and later);
 * direct:    O_DIRECT writes of whole 4 KiB blocks (no page cache; the
 *            write returns once the device has the data).
 *
 * Output, one line: policy, size, MB, wall us/KB, CPU us/KB, and the CPU per
 * 2,300-byte event (an audited YCSB insert) and per 520-byte event (a read).
 *
 * --rate MBPS paces the writes to MBPS megabytes a second instead of
 * writing as fast as it can, and the file starts over (truncated) at every
 * gigabyte: bench/audit-disk-floor runs it beside a loaded sabled, stopped
 * and continued every few seconds, as the bytes an audit log would write
 * without the audit code.  A stop does not make it catch up afterwards.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef RWF_DONTCACHE
#define RWF_DONTCACHE 0x00000080
#endif

typedef enum { P_BUFFERED, P_DROP, P_DONTCACHE, P_DIRECT } policy_t;
static const char *const policy_names[] = {"buffered", "drop", "dontcache", "direct"};

/* Busy jiffies of every CPU: user, nice, system, irq, softirq, steal. */
static long long busy_ticks(void)
{
    long long v[8] = {0};
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL)
        return 0;
    int n = fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n != 8)
        return 0;
    return v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
}

/* SIGTERM or SIGINT: stop writing, remove the file and print the line. */
static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void usage(void)
{
    fprintf(stderr, "usage: sable-writecost [--dir DIR] [--mb N] [--size BYTES] [--sync-mb N]\n"
                    "                       [--policy buffered|drop|dontcache|direct] [--rate MBPS]\n");
    exit(2);
}

/* Write all n bytes of buf (at off when off >= 0, else appended). */
static int write_all(int fd, const char *buf, size_t n, off_t off, policy_t p)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w;
        if (p == P_DONTCACHE) {
            struct iovec iov = {(void *)(buf + done), n - done};
            w = pwritev2(fd, &iov, 1, -1, RWF_DONTCACHE);
        } else if (off >= 0) {
            w = pwrite(fd, buf + done, n - done, off + (off_t)done);
        } else {
            w = write(fd, buf + done, n - done);
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : EIO;
        done += (size_t)w;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *dir = ".";
    size_t mb = 512, size = 65536, sync_mb = 7;
    policy_t policy = P_DROP;
    double rate = 0; /* bytes a second; 0: unpaced */

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            usage();
        const char *v = argv[++i];
        if (strcmp(a, "--dir") == 0) {
            dir = v;
        } else if (strcmp(a, "--mb") == 0) {
            mb = strtoul(v, NULL, 10);
        } else if (strcmp(a, "--size") == 0) {
            size = strtoul(v, NULL, 10);
        } else if (strcmp(a, "--sync-mb") == 0) {
            sync_mb = strtoul(v, NULL, 10);
        } else if (strcmp(a, "--rate") == 0) {
            rate = strtod(v, NULL) * 1048576.0;
            if (!(rate > 0))
                usage();
        } else if (strcmp(a, "--policy") == 0) {
            int k = 0;
            while (k < 4 && strcmp(v, policy_names[k]) != 0)
                k++;
            if (k == 4)
                usage();
            policy = (policy_t)k;
        } else {
            usage();
        }
    }
    if (mb == 0 || size == 0 || sync_mb == 0)
        usage();
    if (policy == P_DIRECT) /* whole blocks only: the device takes nothing smaller */
        size = (size + 4095) & ~(size_t)4095;

    char path[4096];
    snprintf(path, sizeof(path), "%s/sable-writecost.%d", dir, (int)getpid());
    int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
    flags |= policy == P_DIRECT ? O_DIRECT : O_APPEND;
    int fd = open(path, flags, 0600);
    if (fd < 0) {
        fprintf(stderr, "sable-writecost: %s: %s\n", path, strerror(errno));
        return 1;
    }
    char *buf;
    if (posix_memalign((void **)&buf, 4096, size) != 0) {
        fprintf(stderr, "sable-writecost: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < size; i++) /* JSON-like text, one line per 2,300 bytes */
        buf[i] = i % 2300 == 2299 ? '\n' : (char)('a' + i % 26);

    size_t total = mb << 20, written = 0, since_sync = 0, paced = 0;
    off_t dropped = 0, at = 0; /* at: the file's end (it starts over at 1 GB when paced) */
    int rc = 0;
    long long b0 = busy_ticks();
    double t0 = now(), base = t0;
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    while (written < total && rc == 0 && !stop) {
        if (rate > 0) {
            /* The next write is due when the bytes so far fit the rate; a
             * schedule more than 50 ms behind (the process was stopped)
             * starts again from now instead of writing the backlog at once. */
            double due = base + (double)paced / rate, t = now();
            if (t > due + 0.05) {
                base = t - (double)paced / rate;
            } else if (t < due) {
                struct timespec ts = {(time_t)due, (long)((due - (double)(time_t)due) * 1e9)};
                clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
            }
            paced += size;
            if (at >= (off_t)1 << 30) {
                if (fdatasync(fd) != 0 || ftruncate(fd, 0) != 0)
                    rc = errno;
                at = dropped = 0;
                since_sync = 0;
            }
        }
        if (rc == 0)
            rc = write_all(fd, buf, size, policy == P_DIRECT ? at : -1, policy);
        written += size;
        at += (off_t)size;
        since_sync += size;
        if (rc == 0 && policy != P_DIRECT && since_sync >= sync_mb << 20) {
            if (fdatasync(fd) != 0)
                rc = errno;
            if (policy == P_DROP) {
                posix_fadvise(fd, dropped, at - dropped, POSIX_FADV_DONTNEED);
                dropped = at & ~(off_t)4095;
            }
            since_sync = 0;
        }
    }
    if (rc == 0 && policy != P_DIRECT && fdatasync(fd) != 0)
        rc = errno;
    double wall = now() - t0;
    long long ticks = busy_ticks() - b0;
    close(fd);
    unlink(path);
    free(buf);
    if (rc != 0) {
        fprintf(stderr, "sable-writecost: %s: %s\n", policy_names[policy], strerror(rc));
        return 1;
    }
    double kb = (double)written / 1024.0;
    double cpu_us_kb = (double)ticks / (double)sysconf(_SC_CLK_TCK) * 1e6 / kb;
    printf("%-9s %7zu B writes %5zu MB: wall %6.3f us/KB  CPU %6.3f us/KB  "
           "per 2300 B %5.2f us  per 520 B %5.2f us\n",
           policy_names[policy], size, written >> 20, wall * 1e6 / kb, cpu_us_kb, cpu_us_kb * 2300 / 1024,
           cpu_us_kb * 520 / 1024);
    return 0;
}
