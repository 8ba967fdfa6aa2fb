/*
 * generator.h: YCSB's number generators, reimplemented from its documented
 * behaviour: counters (plain and acknowledged), uniform, zipfian (Gray et
 * al.), scrambled zipfian, skewed-latest, hotspot, sequential, exponential,
 * constant, plus the FNV-1a 64 hash YCSB uses for key names.
 *
 * Thread model: a bench_gen_t is private to one thread (copy a template per
 * thread; copies share only the counters they point to).  Counters are
 * shared and lock-free, except the acknowledged counter's window advance,
 * which, as in YCSB, only the thread that wins a try-lock performs.
 */
#ifndef SBENCH_GENERATOR_H
#define SBENCH_GENERATOR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* YCSB's zipfian constant and the scrambled generator's fixed item space. */
#define BENCH_ZIPF_CONSTANT 0.99
#define BENCH_SCRAMBLED_ITEMS 10000000000LL
#define BENCH_SCRAMBLED_ZETAN 26.46902820178302

/* xoshiro256** per-thread random source. */
typedef struct bench_rng {
    uint64_t s[4];
} bench_rng_t;

void bench_rng_seed(bench_rng_t *r, uint64_t seed);
uint64_t bench_rng_next(bench_rng_t *r);
/* Uniform in [0, 1). */
double bench_rng_double(bench_rng_t *r);

/* FNV-1a over the 8 little-endian bytes of v (64-bit offset basis and prime). */
uint64_t bench_fnv1a64(uint64_t v);
/* YCSB's Utils.hash: the FNV-1a value as a signed long, made non-negative with Java's Math.abs. */
int64_t bench_ycsb_hash(int64_t v);

/* A shared, thread-safe counter starting at start. */
typedef struct bench_counter {
    _Atomic int64_t next;
} bench_counter_t;

void bench_counter_init(bench_counter_t *c, int64_t start);
int64_t bench_counter_next(bench_counter_t *c);

/*
 * YCSB's AcknowledgedCounterGenerator: hands out increasing values; last()
 * is the highest value below which every value has been acknowledged, so
 * readers never pick a key whose insert has not completed.  The window holds
 * 2^20 outstanding values.
 */
#define BENCH_ACK_WINDOW (1 << 20)
typedef struct bench_acked_counter {
    _Atomic int64_t next;
    _Atomic int64_t limit;
    atomic_bool *window;
    pthread_mutex_t lock;
} bench_acked_counter_t;

/* Returns 0 or -1 (out of memory). */
int bench_acked_init(bench_acked_counter_t *c, int64_t start);
void bench_acked_free(bench_acked_counter_t *c);
int64_t bench_acked_next(bench_acked_counter_t *c);
int64_t bench_acked_last(bench_acked_counter_t *c);
/* Acknowledge value.  Returns 0, or -1 when more than the window is outstanding. */
int bench_acked_ack(bench_acked_counter_t *c, int64_t value);

/* Zipfian over [base, base+items): item base is the most popular. */
typedef struct bench_zipf {
    int64_t base, items, countforzeta;
    double theta, zeta2theta, alpha, zetan, eta;
} bench_zipf_t;

/* zeta(n, theta) = sum_{i=1..n} 1/i^theta. */
double bench_zeta(int64_t n, double theta);
/* Initialise over [min, max]; zetan < 0 means compute it. */
void bench_zipf_init(bench_zipf_t *z, int64_t min, int64_t max, double theta, double zetan);
/* Draw with itemcount items (grows zetan incrementally when itemcount grew, as YCSB). */
int64_t bench_zipf_next(bench_zipf_t *z, bench_rng_t *r, int64_t itemcount);

typedef enum bench_gen_kind {
    BENCH_GEN_CONSTANT,
    BENCH_GEN_UNIFORM,
    BENCH_GEN_ZIPFIAN,
    BENCH_GEN_SCRAMBLED,
    BENCH_GEN_LATEST,
    BENCH_GEN_HOTSPOT,
    BENCH_GEN_SEQUENTIAL,
    BENCH_GEN_EXPONENTIAL,
} bench_gen_kind_t;

typedef struct bench_gen {
    bench_gen_kind_t kind;
    int64_t lo, hi;          /* constant: lo; uniform/hotspot/sequential/scrambled bounds */
    bench_zipf_t zipf;       /* zipfian, scrambled, latest */
    double hot_data, hot_opn; /* hotspot fractions */
    double gamma;            /* exponential */
    bench_acked_counter_t *basis; /* latest: shared */
    bench_counter_t *seq;         /* sequential: shared */
} bench_gen_t;

void bench_gen_constant(bench_gen_t *g, int64_t v);
void bench_gen_uniform(bench_gen_t *g, int64_t lo, int64_t hi);
void bench_gen_zipfian(bench_gen_t *g, int64_t lo, int64_t hi);
void bench_gen_scrambled(bench_gen_t *g, int64_t lo, int64_t hi);
void bench_gen_latest(bench_gen_t *g, bench_acked_counter_t *basis);
void bench_gen_hotspot(bench_gen_t *g, int64_t lo, int64_t hi, double hot_data, double hot_opn);
/* seq is shared by every copy and must be initialised to lo by the caller. */
void bench_gen_sequential(bench_gen_t *g, int64_t lo, int64_t hi, bench_counter_t *seq);
void bench_gen_exponential(bench_gen_t *g, double percentile, double range);

int64_t bench_gen_next(bench_gen_t *g, bench_rng_t *r);

/*
 * YCSB's key name for keynum: hashed with bench_ycsb_hash unless ordered,
 * then prefix + zero padding to zeropadding digits + decimal number.
 * Writes at most cap bytes; returns the length.
 */
int bench_key_name(char *buf, size_t cap, const char *prefix, int64_t keynum, bool ordered,
                   int zeropadding);

#endif
