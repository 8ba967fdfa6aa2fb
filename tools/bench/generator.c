/*
 * generator.c: YCSB's generators (see generator.h for the contract).
 *
 * Must stay true: the arithmetic follows YCSB 0.17's documented algorithms
 * (zipfian after Gray et al. "Quickly generating billion-record synthetic
 * databases", eta recomputed with the original item count, scrambled zipfian
 * = FNV-1a of a zipfian draw over 10^10 items modulo the key space), so key
 * popularity matches what YCSB would produce for the same parameters.
 */
#include "generator.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

void bench_rng_seed(bench_rng_t *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t bench_rng_next(bench_rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double bench_rng_double(bench_rng_t *r) { return (double)(bench_rng_next(r) >> 11) * 0x1.0p-53; }

/* A non-negative 63-bit draw, as Math.abs(nextLong()) mostly is. */
static inline int64_t rng_nonneg(bench_rng_t *r) { return (int64_t)(bench_rng_next(r) >> 1); }

#define FNV_OFFSET_BASIS_64 0xCBF29CE484222325ULL
#define FNV_PRIME_64 1099511628211ULL

uint64_t bench_fnv1a64(uint64_t v)
{
    uint64_t h = FNV_OFFSET_BASIS_64;
    for (int i = 0; i < 8; i++) {
        h ^= v & 0xff;
        h *= FNV_PRIME_64;
        v >>= 8;
    }
    return h;
}

int64_t bench_ycsb_hash(int64_t v)
{
    uint64_t h = bench_fnv1a64((uint64_t)v);
    /* Math.abs on a Java long: negate through unsigned arithmetic; INT64_MIN stays itself. */
    if ((int64_t)h < 0)
        h = 0 - h;
    return (int64_t)h;
}

void bench_counter_init(bench_counter_t *c, int64_t start) { atomic_init(&c->next, start); }

int64_t bench_counter_next(bench_counter_t *c)
{
    return atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
}

int bench_acked_init(bench_acked_counter_t *c, int64_t start)
{
    atomic_init(&c->next, start);
    atomic_init(&c->limit, start - 1);
    c->window = calloc(BENCH_ACK_WINDOW, sizeof(atomic_bool));
    if (c->window == NULL)
        return -1;
    pthread_mutex_init(&c->lock, NULL);
    return 0;
}

void bench_acked_free(bench_acked_counter_t *c)
{
    if (c->window) {
        free(c->window);
        c->window = NULL;
        pthread_mutex_destroy(&c->lock);
    }
}

int64_t bench_acked_next(bench_acked_counter_t *c)
{
    return atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
}

int64_t bench_acked_last(bench_acked_counter_t *c)
{
    return atomic_load_explicit(&c->limit, memory_order_acquire);
}

int bench_acked_ack(bench_acked_counter_t *c, int64_t value)
{
    size_t slot = (size_t)(value & (BENCH_ACK_WINDOW - 1));
    if (atomic_exchange(&c->window[slot], true))
        return -1; /* the window wrapped: too many unacknowledged values */
    /* Whoever gets the lock advances the limit over contiguous acknowledgements;
     * the others leave their mark for it, as YCSB's tryLock does. */
    if (pthread_mutex_trylock(&c->lock) != 0)
        return 0;
    int64_t limit = atomic_load_explicit(&c->limit, memory_order_relaxed);
    int64_t stop = limit & (BENCH_ACK_WINDOW - 1);
    int64_t i;
    for (i = limit + 1; (i & (BENCH_ACK_WINDOW - 1)) != stop; i++) {
        size_t s = (size_t)(i & (BENCH_ACK_WINDOW - 1));
        if (!atomic_load(&c->window[s]))
            break;
        atomic_store(&c->window[s], false);
    }
    atomic_store_explicit(&c->limit, i - 1, memory_order_release);
    pthread_mutex_unlock(&c->lock);
    return 0;
}

double bench_zeta(int64_t n, double theta)
{
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += 1.0 / pow((double)(i + 1), theta);
    return sum;
}

/* zeta continued from st items (whose sum is initial) up to n items. */
static double zeta_from(int64_t st, int64_t n, double theta, double initial)
{
    double sum = initial;
    for (int64_t i = st; i < n; i++)
        sum += 1.0 / pow((double)(i + 1), theta);
    return sum;
}

void bench_zipf_init(bench_zipf_t *z, int64_t min, int64_t max, double theta, double zetan)
{
    z->items = max - min + 1;
    z->base = min;
    z->theta = theta;
    z->zeta2theta = bench_zeta(2, theta);
    z->alpha = 1.0 / (1.0 - theta);
    z->zetan = zetan >= 0 ? zetan : bench_zeta(z->items, theta);
    z->countforzeta = z->items;
    z->eta = (1 - pow(2.0 / (double)z->items, 1 - theta)) / (1 - z->zeta2theta / z->zetan);
}

int64_t bench_zipf_next(bench_zipf_t *z, bench_rng_t *r, int64_t itemcount)
{
    if (itemcount > z->countforzeta) {
        /* YCSB grows zetan incrementally and keeps the original item count in eta. */
        z->zetan = zeta_from(z->countforzeta, itemcount, z->theta, z->zetan);
        z->countforzeta = itemcount;
        z->eta = (1 - pow(2.0 / (double)z->items, 1 - z->theta)) / (1 - z->zeta2theta / z->zetan);
    }
    double u = bench_rng_double(r);
    double uz = u * z->zetan;
    if (uz < 1.0)
        return z->base;
    if (uz < 1.0 + pow(0.5, z->theta))
        return z->base + 1;
    return z->base + (int64_t)((double)itemcount * pow(z->eta * u - z->eta + 1, z->alpha));
}

void bench_gen_constant(bench_gen_t *g, int64_t v)
{
    memset(g, 0, sizeof(*g));
    g->kind = BENCH_GEN_CONSTANT;
    g->lo = g->hi = v;
}

void bench_gen_uniform(bench_gen_t *g, int64_t lo, int64_t hi)
{
    memset(g, 0, sizeof(*g));
    g->kind = BENCH_GEN_UNIFORM;
    g->lo = lo;
    g->hi = hi;
}

void bench_gen_zipfian(bench_gen_t *g, int64_t lo, int64_t hi)
{
    memset(g, 0, sizeof(*g));
    g->kind = BENCH_GEN_ZIPFIAN;
    g->lo = lo;
    g->hi = hi;
    bench_zipf_init(&g->zipf, lo, hi, BENCH_ZIPF_CONSTANT, -1);
}

void bench_gen_scrambled(bench_gen_t *g, int64_t lo, int64_t hi)
{
    memset(g, 0, sizeof(*g));
    g->kind = BENCH_GEN_SCRAMBLED;
    g->lo = lo;
    g->hi = hi;
    bench_zipf_init(&g->zipf, 0, BENCH_SCRAMBLED_ITEMS, BENCH_ZIPF_CONSTANT, BENCH_SCRAMBLED_ZETAN);
}

void bench_gen_latest(bench_gen_t *g, bench_acked_counter_t *basis)
{
    memset(g, 0, sizeof(*g));
    g->kind = BENCH_GEN_LATEST;
    g->basis = basis;
    int64_t last = bench_acked_last(basis);
    bench_zipf_init(&g->zipf, 0, last - 1, BENCH_ZIPF_CONSTANT, -1);
}

void bench_gen_hotspot(bench_gen_t *g, int64_t lo, int64_t hi, double hot_data, double hot_opn)
{
    memset(g, 0, sizeof(*g));
    g->kind = BENCH_GEN_HOTSPOT;
    if (hot_data < 0 || hot_data > 1)
        hot_data = 0; /* YCSB falls back to 0 for a fraction out of range */
    if (hot_opn < 0 || hot_opn > 1)
        hot_opn = 0;
    if (lo > hi) {
        int64_t t = lo;
        lo = hi;
        hi = t;
    }
    g->lo = lo;
    g->hi = hi;
    g->hot_data = hot_data;
    g->hot_opn = hot_opn;
}

void bench_gen_sequential(bench_gen_t *g, int64_t lo, int64_t hi, bench_counter_t *seq)
{
    memset(g, 0, sizeof(*g));
    g->kind = BENCH_GEN_SEQUENTIAL;
    g->lo = lo;
    g->hi = hi;
    g->seq = seq;
}

void bench_gen_exponential(bench_gen_t *g, double percentile, double range)
{
    memset(g, 0, sizeof(*g));
    g->kind = BENCH_GEN_EXPONENTIAL;
    g->gamma = -log(1.0 - percentile / 100.0) / range;
}

int64_t bench_gen_next(bench_gen_t *g, bench_rng_t *r)
{
    switch (g->kind) {
    case BENCH_GEN_CONSTANT:
        return g->lo;
    case BENCH_GEN_UNIFORM:
        return g->lo + rng_nonneg(r) % (g->hi - g->lo + 1);
    case BENCH_GEN_ZIPFIAN:
        return bench_zipf_next(&g->zipf, r, g->zipf.items);
    case BENCH_GEN_SCRAMBLED: {
        int64_t v = bench_zipf_next(&g->zipf, r, g->zipf.items);
        return g->lo + (int64_t)(bench_fnv1a64((uint64_t)v) % (uint64_t)(g->hi - g->lo + 1));
    }
    case BENCH_GEN_LATEST: {
        int64_t max = bench_acked_last(g->basis);
        return max - bench_zipf_next(&g->zipf, r, max);
    }
    case BENCH_GEN_HOTSPOT: {
        int64_t interval = g->hi - g->lo + 1;
        int64_t hot = (int64_t)((double)interval * g->hot_data);
        int64_t cold = interval - hot;
        if (hot > 0 && (cold == 0 || bench_rng_double(r) < g->hot_opn))
            return g->lo + rng_nonneg(r) % hot;
        return g->lo + hot + rng_nonneg(r) % cold;
    }
    case BENCH_GEN_SEQUENTIAL:
        return g->lo + bench_counter_next(g->seq) % (g->hi - g->lo + 1);
    case BENCH_GEN_EXPONENTIAL:
        return (int64_t)(-log(1.0 - bench_rng_double(r)) / g->gamma);
    }
    return 0;
}

int bench_key_name(char *buf, size_t cap, const char *prefix, int64_t keynum, bool ordered,
                   int zeropadding)
{
    if (!ordered)
        keynum = bench_ycsb_hash(keynum);
    char digits[32];
    int nd = snprintf(digits, sizeof(digits), "%" PRId64, keynum);
    int fill = zeropadding - nd;
    if (fill < 0)
        fill = 0;
    return snprintf(buf, cap, "%s%.*s%s", prefix, fill, "00000000000000000000000000000000", digits);
}
