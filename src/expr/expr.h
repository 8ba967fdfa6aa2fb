/*
 * expr.h: MongoDB's aggregation expression language.  An expression is
 * parsed once into a tree (operators found by binary search in one sorted
 * table) and evaluated many times against documents and variables.
 *
 * What must stay true:
 *  - A parsed tree is immutable: one tree may be evaluated from many threads.
 *  - Evaluation never keeps references into its inputs: every value it hands
 *    back is an owned copy (bson_value_destroy), and "missing" is a value of
 *    type BSON_TYPE_EOD (nothing to free).
 *  - Errors carry MongoDB's codes and messages ("Unrecognized expression
 *    '$foo'" is InvalidPipelineOperator 168, $divide by zero is 2 ...).
 */
#ifndef SBL_EXPR_H
#define SBL_EXPR_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/errors.h"
#include "doc/doc.h"

typedef struct sbl_expr sbl_expr_t;

/* What an evaluation may refer to besides the expression itself. */
typedef struct sbl_expr_env {
    const bson_t *root; /* $$ROOT and the starting $$CURRENT; NULL: no document */
    const bson_t *let;  /* user variables name -> value (constants), or NULL */
    int64_t now_ms;     /* $$NOW (milliseconds since the epoch); 0: the clock */
    const sbl_collation_t *coll; /* how comparisons and $in compare strings; NULL: binary */
    const bson_t *current; /* $$CURRENT and field paths when not root ($redact); NULL: root */
} sbl_expr_env_t;

/*
 * Parse spec (a "$path", "$$var", an {$op: args} document, an object or array of
 * expressions, or a constant) into *exprp (owned by the caller, sbl_expr_free).
 * Returns 0 or an error code with err filled; *exprp is then NULL.
 */
int sbl_expr_parse(const bson_value_t *spec, sbl_expr_t **exprp, sbl_err_t *err);
/* As sbl_expr_parse for a document given as bson_t (an object expression). */
int sbl_expr_parse_doc(const bson_t *spec, sbl_expr_t **exprp, sbl_err_t *err);
void sbl_expr_free(sbl_expr_t *e);

/* True when the expression is a constant (no field paths, variables or operators). */
bool sbl_expr_is_const(const sbl_expr_t *e);

/*
 * Evaluate e.  *out receives an owned value (BSON_TYPE_EOD when the result is
 * missing, e.g. a path that finds nothing or $$REMOVE).  Returns 0 or an error
 * code; *out is then EOD.
 */
int sbl_expr_eval(const sbl_expr_t *e, const sbl_expr_env_t *env, bson_value_t *out,
                  sbl_err_t *err);

/* MongoDB's truthiness: false, null, undefined, missing and numeric zero are false. */
bool sbl_expr_truthy(const bson_value_t *v);

/*
 * Evaluate the values of a command's `let` document (each an expression over no
 * document: constants, $$NOW, operators) into out (initialised here).  Variable
 * names are checked as MongoDB does (lowercase first letter: 16870 otherwise).
 */
int sbl_expr_eval_let(const bson_t *let, bson_t *out, sbl_err_t *err);

/*
 * Copy filter into out (initialised here) with every top-level $expr (also
 * inside $and/$or/$nor) wrapped in a $let that binds the given constants, so
 * a matcher built from out sees the command's `let` variables.
 */
void sbl_expr_bind_let(const bson_t *filter, const bson_t *let_values, bson_t *out);

/*
 * Register $expr and $jsonSchema with the query module's matcher (idempotent;
 * called by sbl_cmd_init and by tests before parsing filters).
 */
void sbl_expr_init(void);

/*
 * The first error an $expr raised inside a matcher on this thread since the last
 * call (such a document just does not match); 0 when none.  Copies it into err
 * (may be NULL) and clears it.  Callers clear it before matching and check after.
 */
int sbl_expr_take_match_error(sbl_err_t *err);

/*
 * $jsonSchema validation (expr_schema.c).  Parse a schema into *planp (owned by the
 * caller, sbl_schema_free); BadValue/FailedToParse on a malformed schema.
 */
typedef struct sbl_schema sbl_schema_t;
int sbl_schema_parse(const bson_t *schema, sbl_schema_t **planp, sbl_err_t *err);
bool sbl_schema_match(const sbl_schema_t *s, const bson_t *doc);
void sbl_schema_free(sbl_schema_t *s);

/*
 * $percentile and $median (expr_pct.c), for the expression, $group and
 * $setWindowFields: the percentiles asked for (median: one, 0.5).
 */
typedef struct sbl_pct {
    double *ps; /* owned (sbl_pct_free) */
    size_t nps;
    bool median; /* the result is one value, not an array */
} sbl_pct_t;
/* Parse spec, the argument of name ("$percentile" or "$median"), as mongod:
 * not_object (the caller's code) when it is no object, 40414 / 40415 for a
 * missing or unknown field, 14 / 2 for a method other than "approximate",
 * 7750300-7750303 for p.  *input: a view of spec's input expression. */
int sbl_pct_parse(const char *name, const bson_value_t *spec, int not_object, sbl_pct_t *pct,
                  bson_value_t *input, sbl_err_t *err);
void sbl_pct_free(sbl_pct_t *pct);
/* Does v count as a sample (a number, not NaN)?  Its value in *x. */
bool sbl_pct_number(const bson_value_t *v, double *x);
/* Sort samples in ascending order (what sbl_pct_result needs). */
void sbl_pct_sort(double *vals, size_t n);
/* The result over the sorted samples vals[0..n) into *out (owned): a double
 * or null ($median), an array of them ($percentile). */
void sbl_pct_result(const sbl_pct_t *pct, const double *vals, size_t n, bson_value_t *out);

#endif
