/*
 * group_int.h: private to src/agg.  The $accumulator accumulator of $group
 * (group_js.c), whose state is one BSON value handed to JavaScript functions
 * (src/js): init(...initArgs) makes it on a group's first document,
 * accumulate(state, ...accumulateArgs) replaces it per document, merge(a, b)
 * joins two partial states (after a spill), finalize(state) gives the result.
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

#endif
