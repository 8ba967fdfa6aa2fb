/*
 * workload.h: YCSB's CoreWorkload for sable-bench: properties, key choice,
 * record values, and the measured load and transaction operations.
 *
 * The bench_workload_t is built once and then read-only except for its
 * shared counters (load key sequence, transaction insert sequence with
 * acknowledgements, sequential chooser); each client thread works through
 * its own bench_wthread_t holding private generator copies and buffers.
 */
#ifndef SBENCH_WORKLOAD_H
#define SBENCH_WORKLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "db.h"
#include "generator.h"
#include "measure.h"
#include "props.h"

typedef enum bench_txn_op { BENCH_TXN_READ, BENCH_TXN_UPDATE, BENCH_TXN_INSERT, BENCH_TXN_SCAN, BENCH_TXN_RMW, BENCH_NTXN } bench_txn_op_t;

typedef struct bench_workload {
    char table[128];
    char keyprefix[64];
    char fieldprefix[64];
    int fieldcount;
    char **fieldnames;
    bench_gen_t fieldlen;
    int64_t maxfieldlen;
    bool readall, writeall, ordered, exponential;
    int zeropadding;
    int64_t recordcount, insertstart, insertcount;
    double weight[BENCH_NTXN]; /* YCSB's proportions, in its order; normalised on use */
    double weightsum;
    bench_gen_t keychooser, scanlen, fieldchooser;
    bench_counter_t keyseq;         /* load: CounterGenerator(insertstart) */
    bench_counter_t seqcounter;     /* requestdistribution=sequential */
    bench_acked_counter_t txnseq;   /* run: AcknowledgedCounterGenerator(recordcount) */
    int insert_retry_limit;
    int insert_retry_interval_s;
    bench_interval_t mode;
} bench_workload_t;

/* Build the workload from properties.  Returns 0, or -1 with a message in err. */
int bench_workload_init(bench_workload_t *wl, const bench_props_t *p, char *err, size_t errlen);
void bench_workload_free(bench_workload_t *wl);

typedef struct bench_wthread {
    bench_workload_t *wl;
    bench_rng_t rng;
    bench_gen_t keychooser, scanlen, fieldchooser, fieldlen;
    const bench_db_t *db;
    void *dbctx;
    bench_stats_t *stats;
    uint64_t intended_ns; /* the paced start of the current operation; 0 when unpaced */
    char *valbuf;
    bench_field_t *values;
    const char **names;
    char key[160];
} bench_wthread_t;

/* Set up a thread's state (copies of the generators, value buffers).  Returns 0 or -1. */
int bench_wthread_init(bench_wthread_t *t, bench_workload_t *wl, const bench_db_t *db, void *dbctx,
                       bench_stats_t *stats, uint64_t seed);
void bench_wthread_free(bench_wthread_t *t);

/* YCSB's doInsert: the next load key.  Returns true when the insert succeeded. */
bool bench_do_insert(bench_wthread_t *t);
/* YCSB's doTransaction: one operation chosen by the proportions.  Returns true. */
bool bench_do_transaction(bench_wthread_t *t);

/* Pick an operation as YCSB's DiscreteGenerator does (weights need not sum to 1). */
bench_txn_op_t bench_choose_op(const bench_workload_t *wl, bench_rng_t *r);
/* YCSB's nextKeynum: a key chooser draw limited to acknowledged inserts. */
int64_t bench_next_keynum(bench_wthread_t *t);
/* Fill t->values with fieldcount (all) or one random field; returns the count. */
int bench_build_values(bench_wthread_t *t, bool all);

uint64_t bench_now_ns(void);

#endif
