/*
 * workload.c: YCSB's CoreWorkload (see workload.h).
 *
 * Must stay true: defaults, key naming, the request-distribution set-up
 * (scrambled zipfian sized for expected inserts, latest over acknowledged
 * inserts, exponential counted back from the newest key) and the measured
 * names (READ, UPDATE, INSERT, SCAN, READ-MODIFY-WRITE, DELETE, and
 * OP-FAILED for failures) follow YCSB 0.17 so results are comparable.
 */
#include "workload.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(err, errlen, __VA_ARGS__);                                                        \
        goto fail;                                                                                 \
    } while (0)

int bench_workload_init(bench_workload_t *wl, const bench_props_t *p, char *err, size_t errlen)
{
    memset(wl, 0, sizeof(*wl));
    bool bad = false;
    const char *workload = bench_props_str(p, "workload", "site.ycsb.workloads.CoreWorkload");
    if (strcmp(workload, "site.ycsb.workloads.CoreWorkload") != 0 &&
        strcmp(workload, "com.yahoo.ycsb.workloads.CoreWorkload") != 0 && strcmp(workload, "CoreWorkload") != 0)
        FAIL("unsupported workload class %s (only CoreWorkload)", workload);
    snprintf(wl->table, sizeof(wl->table), "%s", bench_props_str(p, "table", "usertable"));
    snprintf(wl->keyprefix, sizeof(wl->keyprefix), "%s", bench_props_str(p, "keyprefix", "user"));
    snprintf(wl->fieldprefix, sizeof(wl->fieldprefix), "%s", bench_props_str(p, "fieldnameprefix", "field"));
    wl->fieldcount = (int)bench_props_int(p, "fieldcount", 10, &bad);
    if (wl->fieldcount < 1 || wl->fieldcount > 100000)
        FAIL("fieldcount must be between 1 and 100000");
    wl->fieldnames = calloc((size_t)wl->fieldcount, sizeof(char *));
    if (wl->fieldnames == NULL)
        FAIL("out of memory");
    for (int i = 0; i < wl->fieldcount; i++) {
        char name[96];
        snprintf(name, sizeof(name), "%s%d", wl->fieldprefix, i);
        wl->fieldnames[i] = strdup(name);
        if (wl->fieldnames[i] == NULL)
            FAIL("out of memory");
    }
    int64_t fieldlength = bench_props_int(p, "fieldlength", 100, &bad);
    if (fieldlength < 1)
        FAIL("fieldlength must be positive");
    wl->maxfieldlen = fieldlength;
    const char *fld = bench_props_str(p, "fieldlengthdistribution", "constant");
    if (strcmp(fld, "constant") == 0)
        bench_gen_constant(&wl->fieldlen, fieldlength);
    else if (strcmp(fld, "uniform") == 0)
        bench_gen_uniform(&wl->fieldlen, 1, fieldlength);
    else if (strcmp(fld, "zipfian") == 0)
        bench_gen_zipfian(&wl->fieldlen, 1, fieldlength);
    else
        FAIL("unknown fieldlengthdistribution %s (constant, uniform, zipfian)", fld);

    wl->recordcount = bench_props_int(p, "recordcount", 0, &bad);
    if (wl->recordcount == 0)
        wl->recordcount = INT32_MAX; /* YCSB: no record count means Integer.MAX_VALUE */
    wl->insertstart = bench_props_int(p, "insertstart", 0, &bad);
    wl->insertcount = bench_props_int(p, "insertcount", wl->recordcount - wl->insertstart, &bad);
    if (wl->recordcount < wl->insertstart + wl->insertcount || wl->insertcount < 1)
        FAIL("invalid combination of insertstart, insertcount and recordcount");
    wl->zeropadding = (int)bench_props_int(p, "zeropadding", 1, &bad);
    if (wl->zeropadding > 32)
        wl->zeropadding = 32;
    wl->readall = bench_props_bool(p, "readallfields", true);
    wl->writeall = bench_props_bool(p, "writeallfields", false);

    wl->weight[BENCH_TXN_READ] = bench_props_double(p, "readproportion", 0.95, &bad);
    wl->weight[BENCH_TXN_UPDATE] = bench_props_double(p, "updateproportion", 0.05, &bad);
    wl->weight[BENCH_TXN_INSERT] = bench_props_double(p, "insertproportion", 0.0, &bad);
    wl->weight[BENCH_TXN_SCAN] = bench_props_double(p, "scanproportion", 0.0, &bad);
    wl->weight[BENCH_TXN_RMW] = bench_props_double(p, "readmodifywriteproportion", 0.0, &bad);
    for (int i = 0; i < BENCH_NTXN; i++) {
        if (wl->weight[i] < 0)
            FAIL("operation proportions must not be negative");
        wl->weightsum += wl->weight[i];
    }

    const char *reqd = bench_props_str(p, "requestdistribution", "uniform");
    const char *order = bench_props_str(p, "insertorder", "hashed");
    wl->ordered = strcmp(order, "hashed") != 0;
    int64_t opcount = bench_props_int(p, "operationcount", 0, &bad);
    if (bench_acked_init(&wl->txnseq, wl->recordcount) != 0)
        FAIL("out of memory");
    bench_counter_init(&wl->keyseq, wl->insertstart);
    int64_t lo = wl->insertstart, hi = wl->insertstart + wl->insertcount - 1;
    if (strcmp(reqd, "uniform") == 0) {
        bench_gen_uniform(&wl->keychooser, lo, hi);
    } else if (strcmp(reqd, "exponential") == 0) {
        double pct = bench_props_double(p, "exponential.percentile", 95, &bad);
        double frac = bench_props_double(p, "exponential.frac", 0.8571428571, &bad);
        bench_gen_exponential(&wl->keychooser, pct, (double)wl->recordcount * frac);
        wl->exponential = true;
    } else if (strcmp(reqd, "sequential") == 0) {
        bench_counter_init(&wl->seqcounter, 0);
        bench_gen_sequential(&wl->keychooser, lo, hi, &wl->seqcounter);
    } else if (strcmp(reqd, "zipfian") == 0) {
        /* Leave room for the keys this run will insert, so popularity does not
         * move as the key space grows (YCSB's fudge factor of 2). */
        double ins = wl->weightsum > 0 ? wl->weight[BENCH_TXN_INSERT] : 0;
        if (ins > 1) /* proportions given as percentages: normalise as the chooser will */
            ins = ins / wl->weightsum;
        int64_t expectednew = (int64_t)((double)opcount * ins * 2.0);
        bench_gen_scrambled(&wl->keychooser, lo, wl->insertstart + wl->insertcount + expectednew);
    } else if (strcmp(reqd, "latest") == 0) {
        bench_gen_latest(&wl->keychooser, &wl->txnseq);
    } else if (strcmp(reqd, "hotspot") == 0) {
        double hd = bench_props_double(p, "hotspotdatafraction", 0.2, &bad);
        double ho = bench_props_double(p, "hotspotopnfraction", 0.8, &bad);
        bench_gen_hotspot(&wl->keychooser, lo, hi, hd, ho);
    } else {
        FAIL("unknown requestdistribution \"%s\"", reqd);
    }

    bench_gen_uniform(&wl->fieldchooser, 0, wl->fieldcount - 1);
    int64_t minscan = bench_props_int(p, "minscanlength", 1, &bad);
    int64_t maxscan = bench_props_int(p, "maxscanlength", 1000, &bad);
    if (minscan < 1 || maxscan < minscan)
        FAIL("invalid minscanlength/maxscanlength");
    const char *sld = bench_props_str(p, "scanlengthdistribution", "uniform");
    if (strcmp(sld, "uniform") == 0)
        bench_gen_uniform(&wl->scanlen, minscan, maxscan);
    else if (strcmp(sld, "zipfian") == 0)
        bench_gen_zipfian(&wl->scanlen, minscan, maxscan);
    else
        FAIL("distribution \"%s\" not allowed for scan length", sld);

    wl->insert_retry_limit = (int)bench_props_int(p, "core_workload_insertion_retry_limit", 0, &bad);
    wl->insert_retry_interval_s = (int)bench_props_int(p, "core_workload_insertion_retry_interval", 3, &bad);
    const char *mi = bench_props_str(p, "measurement.interval", "op");
    if (strcmp(mi, "op") == 0)
        wl->mode = BENCH_INTERVAL_OP;
    else if (strcmp(mi, "intended") == 0)
        wl->mode = BENCH_INTERVAL_INTENDED;
    else if (strcmp(mi, "both") == 0)
        wl->mode = BENCH_INTERVAL_BOTH;
    else
        FAIL("measurement.interval must be op, intended or both");
    if (bad)
        FAIL("a numeric workload property has a value that is not a number");
    return 0;
fail:
    bench_workload_free(wl);
    return -1;
}

void bench_workload_free(bench_workload_t *wl)
{
    if (wl->fieldnames)
        for (int i = 0; i < wl->fieldcount; i++)
            free(wl->fieldnames[i]);
    free(wl->fieldnames);
    wl->fieldnames = NULL;
    bench_acked_free(&wl->txnseq);
}

int bench_wthread_init(bench_wthread_t *t, bench_workload_t *wl, const bench_db_t *db, void *dbctx,
                       bench_stats_t *stats, uint64_t seed)
{
    memset(t, 0, sizeof(*t));
    t->wl = wl;
    bench_rng_seed(&t->rng, seed);
    t->keychooser = wl->keychooser;
    t->scanlen = wl->scanlen;
    t->fieldchooser = wl->fieldchooser;
    t->fieldlen = wl->fieldlen;
    t->db = db;
    t->dbctx = dbctx;
    t->stats = stats;
    t->valbuf = malloc((size_t)wl->fieldcount * (size_t)wl->maxfieldlen + 8);
    t->values = calloc((size_t)wl->fieldcount, sizeof(bench_field_t));
    t->names = calloc((size_t)wl->fieldcount, sizeof(char *));
    if (t->valbuf == NULL || t->values == NULL || t->names == NULL) {
        bench_wthread_free(t);
        return -1;
    }
    return 0;
}

void bench_wthread_free(bench_wthread_t *t)
{
    free(t->valbuf);
    free(t->values);
    free(t->names);
    t->valbuf = NULL;
    t->values = NULL;
    t->names = NULL;
}

/* Eight random printable bytes (' ' .. '_') from the low 48 bits of x, six
 * bits each: the bits are spread into the bytes with three shift-and-mask
 * steps (24 bits per half, then 12 per quarter, then 6 per byte), about a
 * dozen instructions for eight bytes instead of a shift, mask and store
 * each (a 1 KB record's values were a third of the client's instructions
 * per insert). */
static inline uint64_t printable8(uint64_t x)
{
    x = (x & 0xFFFFFFull) | (x & 0xFFFFFF000000ull) << 8;
    x = (x & 0x00000FFF00000FFFull) | (x & 0x00FFF00000FFF000ull) << 4;
    x = (x & 0x003F003F003F003Full) | (x & 0x0FC00FC00FC00FC0ull) << 2;
    return x + 0x2020202020202020ull;
}

/* Random printable bytes (' ' .. '_'), six bits per byte, like YCSB's RandomByteIterator. */
static void fill_random(bench_rng_t *r, char *buf, size_t len)
{
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t v = printable8(bench_rng_next(r));
        memcpy(buf + i, &v, 8);
    }
    if (i < len) {
        uint64_t v = printable8(bench_rng_next(r));
        memcpy(buf + i, &v, len - i);
    }
}

int bench_build_values(bench_wthread_t *t, bool all)
{
    bench_workload_t *wl = t->wl;
    int n = 0;
    char *buf = t->valbuf;
    int first = all ? 0 : (int)bench_gen_next(&t->fieldchooser, &t->rng);
    int last = all ? wl->fieldcount - 1 : first;
    for (int f = first; f <= last; f++) {
        int64_t len = bench_gen_next(&t->fieldlen, &t->rng);
        if (len < 1)
            len = 1;
        if (len > wl->maxfieldlen)
            len = wl->maxfieldlen;
        fill_random(&t->rng, buf, (size_t)len);
        t->values[n].name = wl->fieldnames[f];
        t->values[n].value = buf;
        t->values[n].len = (size_t)len;
        buf += len;
        n++;
    }
    return n;
}

bench_txn_op_t bench_choose_op(const bench_workload_t *wl, bench_rng_t *r)
{
    double val = bench_rng_double(r);
    int lastpos = BENCH_TXN_READ;
    for (int i = 0; i < BENCH_NTXN; i++) {
        if (wl->weight[i] <= 0)
            continue;
        double pw = wl->weight[i] / wl->weightsum;
        if (val < pw)
            return (bench_txn_op_t)i;
        val -= pw;
        lastpos = i;
    }
    return (bench_txn_op_t)lastpos; /* rounding left val just above the last weight */
}

int64_t bench_next_keynum(bench_wthread_t *t)
{
    bench_workload_t *wl = t->wl;
    int64_t k;
    if (wl->exponential) {
        do
            k = bench_acked_last(&wl->txnseq) - bench_gen_next(&t->keychooser, &t->rng);
        while (k < 0);
    } else {
        do
            k = bench_gen_next(&t->keychooser, &t->rng);
        while (k > bench_acked_last(&wl->txnseq));
    }
    return k;
}

/* YCSB's DBWrapper: time one call, record it under op or op-FAILED. */
static void measure_op(bench_wthread_t *t, bench_op_t op, bench_status_t st, uint64_t start, uint64_t end)
{
    uint64_t ist = t->intended_ns ? t->intended_ns : start;
    bench_stats_record(t->stats, t->wl->mode, op, st, (end - start) / 1000, (end - ist) / 1000);
}

static void make_key(bench_wthread_t *t, int64_t keynum)
{
    bench_key_name(t->key, sizeof(t->key), t->wl->keyprefix, keynum, t->wl->ordered, t->wl->zeropadding);
}

static bench_status_t wrapped_insert(bench_wthread_t *t, int n)
{
    uint64_t s = bench_now_ns();
    bench_status_t st = t->db->insert(t->dbctx, t->wl->table, t->key, t->values, n);
    measure_op(t, BENCH_OP_INSERT, st, s, bench_now_ns());
    return st;
}

static bench_status_t wrapped_read(bench_wthread_t *t, const char *const *fields, int nf)
{
    uint64_t s = bench_now_ns();
    bench_status_t st = t->db->read(t->dbctx, t->wl->table, t->key, fields, nf);
    measure_op(t, BENCH_OP_READ, st, s, bench_now_ns());
    return st;
}

static bench_status_t wrapped_update(bench_wthread_t *t, int n)
{
    uint64_t s = bench_now_ns();
    bench_status_t st = t->db->update(t->dbctx, t->wl->table, t->key, t->values, n);
    measure_op(t, BENCH_OP_UPDATE, st, s, bench_now_ns());
    return st;
}

bool bench_do_insert(bench_wthread_t *t)
{
    int64_t keynum = bench_counter_next(&t->wl->keyseq);
    make_key(t, keynum);
    int n = bench_build_values(t, true);
    bench_status_t st;
    int tries = 0;
    for (;;) {
        st = wrapped_insert(t, n);
        if (bench_status_ok(st))
            break;
        if (++tries > t->wl->insert_retry_limit)
            break;
        /* YCSB's randomised back-off: 0.8 to 1.2 times the interval. */
        double sleep_s = t->wl->insert_retry_interval_s * (0.8 + 0.4 * bench_rng_double(&t->rng));
        usleep((useconds_t)(sleep_s * 1e6));
    }
    return bench_status_ok(st);
}

/* Fields to read: NULL for all, else one random field. */
static const char *const *read_fields(bench_wthread_t *t, int *nf)
{
    if (t->wl->readall) {
        *nf = 0;
        return NULL;
    }
    t->names[0] = t->wl->fieldnames[bench_gen_next(&t->fieldchooser, &t->rng)];
    *nf = 1;
    return t->names;
}

static void txn_read(bench_wthread_t *t)
{
    make_key(t, bench_next_keynum(t));
    int nf;
    const char *const *f = read_fields(t, &nf);
    wrapped_read(t, f, nf);
}

static void txn_update(bench_wthread_t *t)
{
    make_key(t, bench_next_keynum(t));
    int n = bench_build_values(t, t->wl->writeall);
    wrapped_update(t, n);
}

static void txn_insert(bench_wthread_t *t)
{
    bench_workload_t *wl = t->wl;
    int64_t keynum = bench_acked_next(&wl->txnseq);
    make_key(t, keynum);
    int n = bench_build_values(t, true);
    wrapped_insert(t, n);
    if (bench_acked_ack(&wl->txnseq, keynum) != 0)
        fprintf(stderr, "Too many unacknowledged insertion keys.\n");
}

static void txn_scan(bench_wthread_t *t)
{
    make_key(t, bench_next_keynum(t));
    int len = (int)bench_gen_next(&t->scanlen, &t->rng);
    int nf;
    const char *const *f = read_fields(t, &nf);
    uint64_t s = bench_now_ns();
    bench_status_t st = t->db->scan(t->dbctx, t->wl->table, t->key, len, f, nf);
    measure_op(t, BENCH_OP_SCAN, st, s, bench_now_ns());
}

static void txn_rmw(bench_wthread_t *t)
{
    make_key(t, bench_next_keynum(t));
    int nf;
    const char *const *f = read_fields(t, &nf);
    int n = bench_build_values(t, t->wl->writeall);
    uint64_t s = bench_now_ns();
    bench_status_t rst = wrapped_read(t, f, nf);
    bench_status_t ust = wrapped_update(t, n);
    uint64_t e = bench_now_ns();
    /* YCSB records only the pair's latency; the read and the update carry the statuses. */
    (void)rst;
    (void)ust;
    measure_op(t, BENCH_OP_RMW, BENCH_NSTATUS, s, e);
}

bool bench_do_transaction(bench_wthread_t *t)
{
    switch (bench_choose_op(t->wl, &t->rng)) {
    case BENCH_TXN_READ:
        txn_read(t);
        break;
    case BENCH_TXN_UPDATE:
        txn_update(t);
        break;
    case BENCH_TXN_INSERT:
        txn_insert(t);
        break;
    case BENCH_TXN_SCAN:
        txn_scan(t);
        break;
    case BENCH_TXN_RMW:
        txn_rmw(t);
        break;
    default:
        break;
    }
    return true;
}
