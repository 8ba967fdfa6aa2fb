/*
 * test_bench_gen.c: sable-bench's key and distribution generators against
 * YCSB's documented behaviour: FNV-1a key names, zipfian skew, scrambled
 * zipfian spread, uniform bounds, latest/acknowledged counters, hotspot,
 * sequential, exponential, and the operation chooser's normalisation.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "generator.h"
#include "workload.h"

static void test_keys(void)
{
    char k[64];
    /* Values computed independently with the FNV-1a 64 algorithm and Java's Math.abs;
     * user6284781860667377211 is the first key YCSB 0.17 loads. */
    bench_key_name(k, sizeof(k), "user", 0, false, 1);
    CHECK(strcmp(k, "user6284781860667377211") == 0);
    bench_key_name(k, sizeof(k), "user", 1, false, 1);
    CHECK(strcmp(k, "user8517097267634966620") == 0);
    bench_key_name(k, sizeof(k), "user", 2, false, 1);
    CHECK(strcmp(k, "user1820151046732198393") == 0);
    bench_key_name(k, sizeof(k), "user", 12345, false, 1);
    CHECK(strcmp(k, "user1792800413050876852") == 0);
    bench_key_name(k, sizeof(k), "user", 999999, false, 1);
    CHECK(strcmp(k, "user2744965632448235251") == 0);
    /* ordered inserts and zero padding */
    bench_key_name(k, sizeof(k), "user", 42, true, 1);
    CHECK(strcmp(k, "user42") == 0);
    bench_key_name(k, sizeof(k), "user", 42, true, 6);
    CHECK(strcmp(k, "user000042") == 0);
    bench_key_name(k, sizeof(k), "user", 1234567, true, 3);
    CHECK(strcmp(k, "user1234567") == 0);
    bench_key_name(k, sizeof(k), "key", 7, true, 1);
    CHECK(strcmp(k, "key7") == 0);
    CHECK(bench_fnv1a64(0) == 0x5735A11E0A6AE3BBULL || bench_ycsb_hash(0) == 6284781860667377211LL);
    CHECK(bench_ycsb_hash(0) == 6284781860667377211LL);
    CHECK(bench_java_string_hash("user1") == 111578566);
    CHECK(bench_java_string_hash("user6284781860667377211") == -594971599);
}

static void test_uniform(void)
{
    bench_rng_t r;
    bench_rng_seed(&r, 1);
    bench_gen_t g;
    bench_gen_uniform(&g, 10, 19);
    int hist[10] = {0};
    bool inb = true;
    for (int i = 0; i < 100000; i++) {
        int64_t v = bench_gen_next(&g, &r);
        if (v < 10 || v > 19)
            inb = false;
        else
            hist[v - 10]++;
    }
    CHECK(inb);
    bool flat = true;
    for (int i = 0; i < 10; i++)
        if (hist[i] < 9000 || hist[i] > 11000)
            flat = false;
    CHECK_MSG(flat, "uniform is not flat");
    double d = 0;
    for (int i = 0; i < 1000; i++) {
        double x = bench_rng_double(&r);
        if (x < 0 || x >= 1)
            d = -1;
    }
    CHECK(d == 0);
}

static void test_zipfian(void)
{
    bench_rng_t r;
    bench_rng_seed(&r, 2);
    CHECK(fabs(bench_zeta(2, 0.99) - (1 + 1 / pow(2, 0.99))) < 1e-12);
    bench_gen_t g;
    bench_gen_zipfian(&g, 0, 999);
    static int hist[1000];
    memset(hist, 0, sizeof(hist));
    bool inb = true;
    int n = 200000;
    for (int i = 0; i < n; i++) {
        int64_t v = bench_gen_next(&g, &r);
        if (v < 0 || v > 999)
            inb = false;
        else
            hist[v]++;
    }
    CHECK(inb);
    int maxi = 0;
    for (int i = 1; i < 1000; i++)
        if (hist[i] > hist[maxi])
            maxi = i;
    CHECK_MSG(maxi == 0, "most popular item is %d", maxi);
    CHECK(hist[0] > hist[1] && hist[1] > hist[2] && hist[2] > hist[10]);
    /* P(item 0) = 1/zeta(1000, .99) ~ 0.1337 */
    double p0 = (double)hist[0] / n, want = 1.0 / bench_zeta(1000, 0.99);
    CHECK_MSG(fabs(p0 - want) < 0.01, "p0 %f want %f", p0, want);
    int top10 = 0;
    for (int i = 0; i < 10; i++)
        top10 += hist[i];
    CHECK((double)top10 / n > 0.35);

    /* min offset */
    bench_gen_zipfian(&g, 1, 100);
    int64_t mn = 1000, mx = -1;
    for (int i = 0; i < 10000; i++) {
        int64_t v = bench_gen_next(&g, &r);
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
    }
    CHECK(mn == 1 && mx <= 100);
}

static void test_scrambled(void)
{
    bench_rng_t r;
    bench_rng_seed(&r, 3);
    /* The precomputed zetan is zeta(10^10, 0.99); check its first terms' direction only. */
    CHECK(BENCH_SCRAMBLED_ZETAN > bench_zeta(100000, 0.99));
    bench_gen_t g;
    bench_gen_scrambled(&g, 0, 9999);
    static int hist[10000];
    memset(hist, 0, sizeof(hist));
    bool inb = true;
    int n = 200000;
    for (int i = 0; i < n; i++) {
        int64_t v = bench_gen_next(&g, &r);
        if (v < 0 || v > 9999)
            inb = false;
        else
            hist[v]++;
    }
    CHECK(inb);
    /* The most popular key is where FNV sends zipfian item 0, not key 0. */
    int maxi = 0;
    for (int i = 1; i < 10000; i++)
        if (hist[i] > hist[maxi])
            maxi = i;
    CHECK_MSG(maxi == (int)(bench_fnv1a64(0) % 10000), "hottest %d", maxi);
    /* Spread: hits land in every tenth of the key space, skewed but not clustered at 0. */
    int tenth[10] = {0};
    for (int i = 0; i < 10000; i++)
        tenth[i / 1000] += hist[i];
    bool spread = true;
    for (int i = 0; i < 10; i++)
        if (tenth[i] < n / 100)
            spread = false;
    CHECK(spread);
    int distinct = 0;
    for (int i = 0; i < 10000; i++)
        distinct += hist[i] > 0;
    CHECK(distinct > 2000);
}

static void test_latest(void)
{
    bench_rng_t r;
    bench_rng_seed(&r, 4);
    bench_acked_counter_t c;
    CHECK(bench_acked_init(&c, 1000) == 0);
    CHECK(bench_acked_last(&c) == 999);
    /* Out of order acknowledgements: the limit only moves over a contiguous prefix. */
    int64_t a = bench_acked_next(&c), b = bench_acked_next(&c), d = bench_acked_next(&c);
    CHECK(a == 1000 && b == 1001 && d == 1002);
    CHECK(bench_acked_ack(&c, b) == 0);
    CHECK(bench_acked_last(&c) == 999);
    CHECK(bench_acked_ack(&c, a) == 0);
    CHECK(bench_acked_last(&c) == 1001);
    CHECK(bench_acked_ack(&c, d) == 0);
    CHECK(bench_acked_last(&c) == 1002);

    bench_gen_t g;
    bench_gen_latest(&g, &c);
    int recent = 0, n = 50000;
    bool inb = true;
    for (int i = 0; i < n; i++) {
        int64_t v = bench_gen_next(&g, &r);
        if (v < 0 || v > 1002)
            inb = false;
        if (v >= 1002 - 10)
            recent++;
    }
    CHECK(inb);
    CHECK_MSG((double)recent / n > 0.3, "latest favours recent: %d", recent);
    /* After more inserts, the newest keys are the hot ones. */
    for (int i = 0; i < 100; i++)
        bench_acked_ack(&c, bench_acked_next(&c));
    CHECK(bench_acked_last(&c) == 1102);
    int newer = 0;
    for (int i = 0; i < n; i++)
        if (bench_gen_next(&g, &r) > 1090)
            newer++;
    CHECK((double)newer / n > 0.3);
    bench_acked_free(&c);
}

static void test_others(void)
{
    bench_rng_t r;
    bench_rng_seed(&r, 5);
    bench_gen_t g;
    bench_gen_hotspot(&g, 0, 999, 0.2, 0.8);
    int hot = 0, n = 100000;
    for (int i = 0; i < n; i++)
        if (bench_gen_next(&g, &r) < 200)
            hot++;
    CHECK_MSG(fabs((double)hot / n - 0.8) < 0.02, "hotspot %d", hot);

    bench_counter_t seq;
    bench_counter_init(&seq, 0);
    bench_gen_sequential(&g, 5, 7, &seq);
    CHECK(bench_gen_next(&g, &r) == 5);
    CHECK(bench_gen_next(&g, &r) == 6);
    CHECK(bench_gen_next(&g, &r) == 7);
    CHECK(bench_gen_next(&g, &r) == 5);

    /* Exponential: 95% of draws below range. */
    bench_gen_exponential(&g, 95, 1000);
    int below = 0;
    for (int i = 0; i < n; i++)
        if (bench_gen_next(&g, &r) < 1000)
            below++;
    CHECK_MSG(fabs((double)below / n - 0.95) < 0.01, "exponential %d", below);

    bench_gen_constant(&g, 100);
    CHECK(bench_gen_next(&g, &r) == 100);
    bench_counter_t cnt;
    bench_counter_init(&cnt, 7);
    CHECK(bench_counter_next(&cnt) == 7 && bench_counter_next(&cnt) == 8);
}

static void test_workload(void)
{
    bench_props_t p;
    bench_props_init(&p);
    char err[256];
    /* 50/50 is normalised like 0.5/0.5. */
    bench_props_set(&p, "readproportion", "50");
    bench_props_set(&p, "updateproportion", "50");
    bench_props_set(&p, "insertproportion", "0");
    bench_props_set(&p, "recordcount", "1000");
    bench_props_set(&p, "operationcount", "1000");
    bench_props_set(&p, "requestdistribution", "zipfian");
    bench_workload_t wl;
    CHECK(bench_workload_init(&wl, &p, err, sizeof(err)) == 0);
    bench_rng_t r;
    bench_rng_seed(&r, 6);
    int cnt[BENCH_NTXN] = {0};
    for (int i = 0; i < 100000; i++)
        cnt[bench_choose_op(&wl, &r)]++;
    CHECK(cnt[BENCH_TXN_INSERT] == 0 && cnt[BENCH_TXN_SCAN] == 0 && cnt[BENCH_TXN_RMW] == 0);
    CHECK_MSG(abs(cnt[BENCH_TXN_READ] - 50000) < 1500, "reads %d", cnt[BENCH_TXN_READ]);
    CHECK(wl.keychooser.kind == BENCH_GEN_SCRAMBLED && wl.keychooser.hi == 1000);
    CHECK(wl.fieldcount == 10 && strcmp(wl.fieldnames[9], "field9") == 0);
    CHECK(wl.readall && !wl.writeall && !wl.ordered);

    /* Keys stay below the acknowledged insert limit. */
    bench_wthread_t t;
    CHECK(bench_wthread_init(&t, &wl, NULL, NULL, NULL, 9) == 0);
    bool ok = true;
    for (int i = 0; i < 10000; i++) {
        int64_t k = bench_next_keynum(&t);
        if (k < 0 || k > 999)
            ok = false;
    }
    CHECK(ok);
    CHECK(bench_build_values(&t, true) == 10);
    CHECK(t.values[0].len == 100 && strcmp(t.values[3].name, "field3") == 0);
    /* YCSB's values: printable ' ' .. '_', each of the 64 about equally
     * often, and the fields one after another in the buffer (no byte
     * written past a field's end: 100 is not a multiple of 8). */
    int seen[64] = {0};
    bool printable = true;
    for (int rep = 0; rep < 100; rep++) {
        CHECK(bench_build_values(&t, true) == 10);
        for (int f = 0; f < 10; f++) {
            if (f > 0 && t.values[f].value != t.values[f - 1].value + t.values[f - 1].len)
                printable = false;
            for (size_t i = 0; i < t.values[f].len; i++) {
                unsigned char c = (unsigned char)t.values[f].value[i];
                if (c < ' ' || c > '_')
                    printable = false;
                else
                    seen[c - ' ']++;
            }
        }
    }
    CHECK(printable);
    int lo = seen[0], hi = seen[0]; /* 100,000 bytes: about 1,562 each */
    for (int i = 1; i < 64; i++) {
        lo = seen[i] < lo ? seen[i] : lo;
        hi = seen[i] > hi ? seen[i] : hi;
    }
    CHECK_MSG(lo > 1350 && hi < 1780, "character counts %d..%d", lo, hi);
    CHECK(bench_build_values(&t, false) == 1);
    bench_wthread_free(&t);
    bench_workload_free(&wl);

    /* Bad settings are refused with a reason. */
    bench_props_set(&p, "requestdistribution", "pareto");
    CHECK(bench_workload_init(&wl, &p, err, sizeof(err)) != 0 && strstr(err, "pareto"));
    bench_props_set(&p, "requestdistribution", "uniform");
    bench_props_set(&p, "insertstart", "500");
    bench_props_set(&p, "insertcount", "600");
    CHECK(bench_workload_init(&wl, &p, err, sizeof(err)) != 0);
    bench_props_set(&p, "insertcount", "500");
    bench_props_set(&p, "insertorder", "ordered");
    CHECK(bench_workload_init(&wl, &p, err, sizeof(err)) == 0);
    CHECK(wl.ordered && wl.keychooser.lo == 500 && wl.keychooser.hi == 999);
    bench_workload_free(&wl);
    bench_props_free(&p);
}

int main(void)
{
    test_keys();
    test_uniform();
    test_zipfian();
    test_scrambled();
    test_latest();
    test_others();
    test_workload();
    return CHECK_DONE("test_bench_gen");
}
