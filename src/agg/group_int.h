/*
 * group_int.h: private to src/agg.  The $accumulator accumulator of $group
 * (group_js.c), whose state is one BSON value handed to JavaScript functions
 * (src/js): init(...initArgs) makes it on a group's first document,
 * accumulate(state, ...accumulateArgs) replaces it per document, merge(a, b)
 * joins two partial states (after a spill), finalize(state) gives the result.
 * And the sortBy/output side of $top, $bottom, $topN and $bottomN (group_top.c).
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

#endif
