/*
 * window_int.h: private to src/agg.  $setWindowFields' parsed output fields
 * (window.c parses the stage and orders the partitions, window_fn.c computes
 * the functions over one partition).
 */
#ifndef SBL_WINDOW_INT_H
#define SBL_WINDOW_INT_H

#include "agg/agg.h"
#include "expr/expr.h"

typedef enum wfn {
    W_SUM, W_AVG, W_MIN, W_MAX, W_COUNT, W_FIRST, W_LAST, W_PUSH, W_ADDTOSET,
    W_STDPOP, W_STDSAMP, W_COVPOP, W_COVSAMP, W_DERIV, W_INTEGRAL, W_PERCENTILE, W_MEDIAN,
    /* no window: the partition in order */
    W_RANK, W_DENSE, W_DOCNUM, W_SHIFT, W_EMA, W_LOCF, W_LINFILL
} wfn_t;

typedef enum { WB_UNBOUNDED, WB_CURRENT, WB_NUMBER } wbound_kind_t;

typedef struct wbound {
    wbound_kind_t kind;
    double num; /* WB_NUMBER: documents (an integer) or a range offset */
} wbound_t;

/* What the stage's sortBy is: whether there is one, and whether it is one field. */
typedef struct wsort {
    bool has_sort, single, descending;
    const char *field; /* single: its path */
} wsort_t;

typedef struct wout {
    const char *path; /* a view into the stage spec */
    wfn_t fn;
    sbl_expr_t *e, *e2;  /* the input; e2: covariance's second */
    bool has_window;     /* else the whole partition */
    bool range, has_unit;
    wbound_t lo, hi;     /* default: unbounded, unbounded */
    int64_t unit_ms;     /* a range's unit (0 with unit_months) */
    int unit_months;     /* month 1, quarter 3, year 12 */
    int64_t fn_unit_ms;  /* $derivative's / $integral's unit (0: none) */
    int64_t shift_by;
    bson_value_t dflt;   /* $shift's default (owned) */
    double alpha;        /* $expMovingAvg */
    sbl_pct_t pct;       /* $percentile / $median: the percentiles asked for */
} wout_t;

/* One partition, in order: its documents, their sortBy values (sv, EOD when
 * there is no single sortBy field) and whether two consecutive documents tie
 * on sortBy (tie[i]: documents i-1 and i, for ranks). */
typedef struct wpart {
    bson_t **docs;
    bson_value_t *sv;
    bool *tie;
    size_t n;
} wpart_t;

/* Compute o for every document of p into out[0..n) (owned values, EOD for
 * none).  *bytesp grows by what the values hold. */
int sbl_window_compute(const sbl_agg_env_t *env, const wout_t *o, const wpart_t *p,
                       bson_value_t *out, size_t *bytesp, sbl_err_t *err);

/* A time unit's length (*msp, 0 for calendar units) and months (*monthsp);
 * -1 for a name that is no unit. */
int sbl_window_unit_ms(const char *u, int64_t *msp, int *monthsp);

/* ms (a date) plus n calendar months, the day of month clamped to the month's
 * last, as $dateAdd does. */
double sbl_window_add_months(double ms, double n);

#endif
