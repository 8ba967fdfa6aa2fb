/*
 * expr_int.h: private to src/expr.  The parsed tree, the operator table's
 * entry type, the evaluation context (variable scopes) and the value helpers
 * the operator files share.
 *
 * What must stay true: an operator's eval function leaves *out either an
 * owned value or EOD (missing), also when it fails; it never keeps pointers
 * into values it evaluated after returning.
 */
#ifndef SBL_EXPR_INT_H
#define SBL_EXPR_INT_H

#include "expr/expr.h"

enum expr_kind { E_CONST, E_FIELD, E_VAR, E_OBJECT, E_ARRAY, E_OP };

typedef struct ectx ectx_t;
typedef struct op_def op_def_t;

typedef int (*op_eval_fn)(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err);
typedef int (*op_parse_fn)(const op_def_t *op, const bson_value_t *arg, sbl_expr_t *e,
                           sbl_err_t *err);

struct op_def {
    const char *name;
    op_eval_fn eval;
    int min_args, max_args;    /* positional arity; max -1: any */
    const char *const *named;  /* argument names ("*x": required); NULL: positional only */
    op_parse_fn parse;         /* NULL: the generic parser */
};

struct sbl_expr {
    enum expr_kind kind;
    bson_value_t cval;      /* E_CONST: owned */
    char *var;              /* E_VAR: the name without "$$" */
    char *path;             /* E_FIELD / E_VAR: dotted path below it (NULL: none) */
    const op_def_t *op;     /* E_OP */
    size_t n;               /* kids */
    char **names;           /* E_OBJECT field names; $let variable names */
    sbl_expr_t **kids;      /* NULL entries: absent optional named arguments */
    bool all_const;         /* E_OBJECT / E_ARRAY made only of constants */
};

typedef struct scope {
    const char *name;
    const bson_value_t *val;
    const struct scope *up;
} scope_t;

struct ectx {
    const sbl_expr_env_t *env;
    const scope_t *scope;
    bson_value_t root; /* view of env->root (EOD when none) */
    int64_t now_ms;
    int depth;
};

/* Deepest nesting of a parsed expression (an evaluation may go four times deeper). */
#define EXPR_MAX_DEPTH 150

/* expr_js.c: $function, and registering $where with the matcher. */
int op_function(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err);
void sbl_expr_js_init(void);

/* expr.c */
int ex_eval(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err);
/* Evaluate the i-th kid (EOD when absent). */
int ex_kid(const sbl_expr_t *e, size_t i, ectx_t *c, bson_value_t *out, sbl_err_t *err);
const op_def_t *ex_find_op(const char *name);
/* Resolve a dotted path below base (documents entered, arrays mapped as MongoDB). */
void ex_resolve(const bson_value_t *base, const char *path, bson_value_t *out);
/* Look a variable up in scope, then let, then the builtins; 17276 when undefined. */
int ex_var(ectx_t *c, const char *name, bson_value_t *out, sbl_err_t *err);

/* values (expr.c) */
/* bson_value_copy that also copies "missing" (EOD); every copy in src/expr goes here. */
void v_copy(const bson_value_t *src, bson_value_t *dst);
void v_missing(bson_value_t *v);
void v_null(bson_value_t *v);
void v_bool(bson_value_t *v, bool b);
void v_i32(bson_value_t *v, int32_t x);
void v_i64(bson_value_t *v, int64_t x);
void v_double(bson_value_t *v, double x);
void v_date(bson_value_t *v, int64_t ms);
void v_str(bson_value_t *v, const char *s, size_t len); /* owned copy */
/* Take the bytes of b (destroyed here) as an owned document or array value. */
void v_take_doc(bson_value_t *v, bson_t *b, bool array);
bool v_nullish(const bson_value_t *v); /* missing, null or undefined */
bool v_is_num(const bson_value_t *v);
double v_to_double(const bson_value_t *v);
/* Exact integer value of a number (doubles/decimals only when integral). */
bool v_to_i64(const bson_value_t *v, int64_t *out);
/* A static view of a document/array value. */
bool v_doc(const bson_value_t *v, bson_t *b);
/* Three-way comparison in MongoDB order with missing below everything. */
int v_cmp(const bson_value_t *a, const bson_value_t *b);
/* v_cmp under the evaluation's collation (env->coll). */
int v_cmp_env(const ectx_t *c, const bson_value_t *a, const bson_value_t *b);
/* Array key for index i (buffer of 16). */
const char *v_key(uint32_t i, char buf[16]);
/* Number of elements of an array value. */
uint32_t v_array_len(const bson_value_t *v);
/* Decimal128 helpers (through long double). */
long double v_to_ldouble(const bson_value_t *v);
void v_decimal(bson_value_t *v, long double x);

/* The operator evaluators (expr_ops.c, expr_arr.c, expr_date.c); named in the table. */
#define OPS(X)                                                                                     \
    X(abs) X(add) X(allElementsTrue) X(and) X(anyElementTrue) X(arrayElemAt) X(arrayToObject)     \
    X(avg) X(ceil) X(cmp) X(concat) X(concatArrays) X(cond) X(convert) X(dateAdd) X(dateDiff)     \
    X(dateFromParts) X(dateFromString) X(dateSubtract) X(dateToParts) X(dateToString)            \
    X(datepart) X(divide) X(eq) X(exp) X(filter) X(first) X(floor) X(getField) X(gt) X(gte)        \
    X(ifNull) X(in) X(indexOfArray) X(indexOfBytes) X(indexOfCP) X(isArray) X(isNumber) X(last)   \
    X(let) X(literal) X(ln) X(log) X(log10) X(lt) X(lte) X(ltrim) X(map) X(max) X(mergeObjects) X(meta) \
    X(min) X(mod) X(multiply) X(ne) X(not) X(objectToArray) X(or) X(pow) X(range) X(reduce)       \
    X(regexFind) X(regexFindAll) X(regexMatch) X(replaceAll) X(replaceOne) X(reverseArray)       \
    X(round) X(rtrim) X(setDifference) X(setEquals) X(setField) X(setIntersection)               \
    X(setIsSubset) X(setUnion) X(size) X(slice) X(split) X(sqrt) X(strLenBytes) X(strLenCP)      \
    X(strcasecmp) X(substrBytes) X(substrCP) X(subtract) X(sum) X(switch) X(toBool) X(toDate)    \
    X(toDecimal) X(toDouble) X(toInt) X(toLong) X(toLower) X(toObjectId) X(toString) X(toUpper)  \
    X(trim) X(trunc) X(type) X(zip) X(sortArray) X(rand) X(tsSecond) X(tsIncrement)       \
    X(percentile) X(median)

#define OP_DECL(n) int op_##n(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err);
OPS(OP_DECL)
#undef OP_DECL

/* Parsing (expr_parse.c). */
/* A variable name's rules: 16869 empty, 16870 bad first character (an
 * upper-case one only when not defining), 16871 bad character. */
int ex_check_var_name(const char *name, bool defining, sbl_err_t *err);
/* Special parsers. */
int parse_literal(const op_def_t *op, const bson_value_t *arg, sbl_expr_t *e, sbl_err_t *err);
int parse_meta(const op_def_t *op, const bson_value_t *arg, sbl_expr_t *e, sbl_err_t *err);
int parse_let(const op_def_t *op, const bson_value_t *arg, sbl_expr_t *e, sbl_err_t *err);
int parse_switch(const op_def_t *op, const bson_value_t *arg, sbl_expr_t *e, sbl_err_t *err);
/* $percentile / $median (expr_pct.c). */
int parse_pct(const op_def_t *op, const bson_value_t *arg, sbl_expr_t *e, sbl_err_t *err);

/* Conversion shared by $convert and the $to* shortcuts (expr_date.c). */
int ex_convert(const bson_value_t *in, bson_type_t to, bson_value_t *out, sbl_err_t *err);

#endif
