/*
 * group_int.h: private to src/agg.  The $accumulator accumulator of $group
 * (group_js.c), whose state is one BSON value handed to JavaScript functions
 * (src/js): init(...initArgs) makes it on a group's first document,
 * accumulate(state, ...accumulateArgs) replaces it per document, merge(a, b)
 * joins two partial states (after a spill), finalize(state) gives the result.
 * And the sortBy/output side of $top, $bottom, $topN and $bottomN (group_top.c).
 * And what group.c's accumulators are (their kinds, parsed specs and states),
 * for group_args.c, which parses those that take an object.
 */
#ifndef SBL_GROUP_INT_H
#define SBL_GROUP_INT_H

#include "agg/agg.h"
#include "expr/expr.h"

typedef struct sbl_js_acc sbl_js_acc_t;

/* Parse {$accumulator: spec}: *accp (free with sbl_js_acc_free) and the
 * accumulateArgs expression *argsp (the caller frees it with sbl_expr_free). */
int sbl_js_acc_parse(const bson_value_t *spec, sbl_js_acc_t **accp, sbl_expr_t **argsp,
                     sbl_err_t *err);
void sbl_js_acc_free(sbl_js_acc_t *j);
/* One document: init the state (*seenp false) then accumulate into *state. */
int sbl_js_acc_step(const sbl_agg_env_t *env, const sbl_js_acc_t *j, const sbl_expr_t *args,
                    bson_value_t *state, bool *seenp, const bson_t *doc, sbl_err_t *err);
/* Merge a later partial state into *state (copied when there was none). */
int sbl_js_acc_merge(const sbl_js_acc_t *j, bson_value_t *state, bool *seenp,
                     const bson_value_t *later, sbl_err_t *err);
/* Append field: finalize(state) or the state (null when unseen); a failing
 * finalize appends null and leaves its error pending with src/js. */
void sbl_js_acc_result(bson_t *out, const char *field, const sbl_js_acc_t *j,
                       const bson_value_t *state, bool seen);

/* $top / $bottom / $topN / $bottomN (group_top.c): the sortBy and output of one. */
typedef struct sbl_top sbl_top_t;

/* Parse the object spec of accumulator name ($topN ...; single: $top or
 * $bottom, which take no n) into *topp (free with sbl_top_free); *np: n's
 * expression, a view into spec (EOD when single).  mongod's errors
 * (5788002-5788005, $sort's for sortBy). */
int sbl_top_parse(const char *name, const bson_t *spec, bool single, sbl_top_t **topp,
                  bson_value_t *np, sbl_err_t *err);
void sbl_top_free(sbl_top_t *t);
/* doc's item, {o: output, s0: sort value ...}, into *item (the caller destroys it). */
int sbl_top_item(const sbl_agg_env_t *env, const sbl_top_t *t, const bson_t *doc,
                 bson_value_t *item, sbl_err_t *err);
/* Three-way order of two items by sortBy (strings under coll, NULL: binary). */
int sbl_top_compare(const sbl_top_t *t, const bson_value_t *a, const bson_value_t *b,
                    const sbl_collation_t *coll);
/* Append item's output as key of out (null when the output was missing). */
void sbl_top_output(bson_t *out, const char *key, const bson_value_t *item);

/* ---- group.c's accumulators ---------------------------------------------------------------- */

enum acc_kind {
    A_SUM,
    A_AVG,
    A_MIN,
    A_MAX,
    A_FIRST,
    A_LAST,
    A_PUSH,
    A_ADDTOSET,
    A_COUNT,
    A_MERGE,
    A_STDDEV_POP,
    A_STDDEV_SAMP,
    A_FIRSTN,
    A_LASTN,
    A_MINN,
    A_MAXN,
    A_ACCUMULATOR,
    A_TOP,
    A_BOTTOM,
    A_TOPN,
    A_BOTTOMN,
    A_PERCENTILE,
    A_MEDIAN
};

typedef struct acc_spec {
    const char *field;
    sbl_js_acc_t *js;  /* $accumulator's functions */
    sbl_top_t *top;    /* $top $bottom $topN $bottomN: sortBy and output */
    enum acc_kind kind;
    bson_value_t expr; /* a view into the stage spec */
    sbl_expr_t *e;     /* parsed expr ($firstN...: its input) */
    sbl_expr_t *n_e;   /* $firstN $lastN $minN $maxN $topN $bottomN: n, on the group's _id */
    sbl_pct_t pct;     /* $percentile $median: the percentiles asked for */
} acc_spec_t;

typedef struct acc_state {
    int64_t isum;
    double dsum;
    bool has_double, has_long, overflow;
    int64_t count;
    double mean, m2;  /* $stdDevPop/$stdDevSamp: Welford's running mean and squares */
    int64_t nmax;     /* $firstN $lastN $minN $maxN $topN $bottomN: n (0 until evaluated) */
    bson_value_t val; /* min/max/first/last; BSON_TYPE_EOD when unset */
    bool seen;
    bson_value_t *items; /* push/addToSet, the N ones' kept values, $percentile's samples */
    size_t nitems, capitems;
    size_t bytes; /* what val and items hold */
} acc_state_t;

/* group_args.c: the accumulators whose argument is an object.  Each parses
 * s->expr (named name) into s's expressions with mongod's errors. */
/* $firstN $lastN $minN $maxN: {input, n}. */
int sbl_group_parse_n(const char *name, acc_spec_t *s, sbl_err_t *err);
/* $top $bottom $topN $bottomN: {output, sortBy[, n]}. */
int sbl_group_parse_top(const char *name, acc_spec_t *s, sbl_err_t *err);
/* $percentile $median: {input[, p], method} (src/expr's sbl_pct_parse). */
int sbl_group_parse_pct(const char *name, acc_spec_t *s, sbl_err_t *err);
/* n of an N accumulator for the group whose _id is id (a positive integer)
 * into a->nmax; 5787902 / 5787903 / 5787908 otherwise. */
int sbl_group_eval_n(const sbl_agg_env_t *env, const acc_spec_t *s, const bson_value_t *id,
                     acc_state_t *a, sbl_err_t *err);

#endif
