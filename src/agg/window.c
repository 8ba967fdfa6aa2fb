/*
 * window.c: $setWindowFields.  The input is ordered by partition (the value
 * of partitionBy) then by sortBy; each output field is a window function
 * computed, for every document, over the documents of its partition that its
 * window holds: documents [lo, hi] relative to the current position, or
 * range [lo, hi] relative to the current sortBy value (numbers, or dates with
 * a unit), "unbounded" and "current" ends included.  Rank functions, $shift,
 * $expMovingAvg, $locf and $linearFill look at the partition in order
 * instead of a window.
 *
 * What must stay true: a window that keeps its lower end and grows at its
 * upper end (the default whole partition, running ["unbounded", x]) is
 * accumulated incrementally, any other is accumulated afresh; each
 * expression is parsed once per stage; a partition's documents and computed
 * values are held to internalDocumentSourceSetWindowFieldsMaxMemoryBytes
 * unless the operation may use the disk (5643011, as mongod).
 */
#include "agg/agg_int.h"
#include "agg/window_int.h"
#include "doc/doc.h"
#include "expr/expr.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- parsing ------------------------------------------------------------------------------ */

static const struct {
    const char *name;
    wfn_t fn;
} fn_table[] = {/* sorted by name */
                {"$addToSet", W_ADDTOSET},
                {"$avg", W_AVG},
                {"$count", W_COUNT},
                {"$covariancePop", W_COVPOP},
                {"$covarianceSamp", W_COVSAMP},
                {"$denseRank", W_DENSE},
                {"$derivative", W_DERIV},
                {"$documentNumber", W_DOCNUM},
                {"$expMovingAvg", W_EMA},
                {"$first", W_FIRST},
                {"$integral", W_INTEGRAL},
                {"$last", W_LAST},
                {"$linearFill", W_LINFILL},
                {"$locf", W_LOCF},
                {"$max", W_MAX},
                {"$median", W_MEDIAN},
                {"$min", W_MIN},
                {"$percentile", W_PERCENTILE},
                {"$push", W_PUSH},
                {"$rank", W_RANK},
                {"$shift", W_SHIFT},
                {"$stdDevPop", W_STDPOP},
                {"$stdDevSamp", W_STDSAMP},
                {"$sum", W_SUM}};

static int find_fn(const char *name)
{
    size_t lo = 0, hi = sizeof(fn_table) / sizeof(fn_table[0]);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(name, fn_table[mid].name);
        if (c == 0)
            return (int)fn_table[mid].fn;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return -1;
}

int sbl_window_unit_ms(const char *u, int64_t *msp, int *monthsp)
{
    static const struct {
        const char *name;
        int64_t ms;
        int months;
    } units[] = {{"millisecond", 1, 0},      {"second", 1000, 0},    {"minute", 60000, 0},
                 {"hour", 3600000, 0},       {"day", 86400000, 0},   {"week", 604800000, 0},
                 {"month", 0, 1},            {"quarter", 0, 3},      {"year", 0, 12}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strcmp(u, units[i].name) == 0) {
            *msp = units[i].ms;
            *monthsp = units[i].months;
            return 0;
        }
    return -1;
}

static int parse_bound(const bson_iter_t *it, bool documents, bool unit, wbound_t *b,
                       sbl_err_t *err)
{
    if (BSON_ITER_HOLDS_UTF8(it)) {
        const char *s = bson_iter_utf8(it, NULL);
        if (strcmp(s, "unbounded") == 0)
            b->kind = WB_UNBOUNDED;
        else if (strcmp(s, "current") == 0)
            b->kind = WB_CURRENT;
        else
            return sbl_err_set(err, SBL_E_FailedToParse,
                               "Window bounds must be 'unbounded', 'current', or a number.");
        return 0;
    }
    if (!BSON_ITER_HOLDS_NUMBER(it) && !BSON_ITER_HOLDS_DECIMAL128(it))
        return sbl_err_set(err, SBL_E_FailedToParse,
                           documents ? "Numeric document-based bounds must be an integer"
                                     : "Range-based bounds expression must be a number");
    bson_value_t v;
    sbl_iter_value(it, &v);
    b->kind = WB_NUMBER;
    b->num = sbl_number_double(&v);
    if ((documents || unit) && (b->num != floor(b->num) || fabs(b->num) > 2147483647.0))
        return sbl_err_set(err, SBL_E_FailedToParse,
                           documents ? "Numeric document-based bounds must be an integer"
                                     : "With 'unit', range-based bounds must be an integer");
    if (isnan(b->num))
        return sbl_err_set(err, SBL_E_FailedToParse, "Range-based bounds expression must be a "
                                                     "number");
    return 0;
}

static double bound_num(const wbound_t *b)
{
    return b->kind == WB_CURRENT ? 0 : b->num;
}

/* {documents: [lo, hi]} or {range: [lo, hi], unit}. */
static int parse_window(const bson_iter_t *it, wout_t *o, const wsort_t *ws, sbl_err_t *err)
{
    bson_iter_t f, arr;
    const bson_iter_t *docs = NULL, *range = NULL;
    bson_iter_t docs_it, range_it;
    const char *unit = NULL;
    int n = 0;
    if (!BSON_ITER_HOLDS_DOCUMENT(it))
        return sbl_err_set(err, SBL_E_FailedToParse, "'window' field must be an object");
    bson_iter_recurse(it, &f);
    while (bson_iter_next(&f)) {
        const char *k = bson_iter_key(&f);
        n++;
        if (strcmp(k, "documents") == 0) {
            docs_it = f;
            docs = &docs_it;
        } else if (strcmp(k, "range") == 0) {
            range_it = f;
            range = &range_it;
        } else if (strcmp(k, "unit") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&f))
                return sbl_err_set(err, SBL_E_FailedToParse, "'unit' must be a string");
            unit = bson_iter_utf8(&f, NULL);
        }
    }
    if (docs != NULL && range != NULL)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "Window bounds can specify either 'documents' or 'unit', not both.");
    if (range == NULL && unit != NULL)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "Window bounds can only specify 'unit' with range-based bounds.");
    if (docs == NULL && range == NULL) {
        if (n != 0)
            return sbl_err_set(err, SBL_E_FailedToParse,
                               "'window' field can only contain 'documents' as the only argument "
                               "or 'range' with an optional 'unit' field");
        return 0; /* {}: the default, the whole partition */
    }
    if (n != (docs != NULL ? 1 : unit != NULL ? 2 : 1))
        return sbl_err_set(err, SBL_E_FailedToParse, "'window' field that specifies %s cannot "
                                                     "have other fields",
                           docs != NULL ? "documents" : "range");
    const bson_iter_t *b = docs != NULL ? docs : range;
    bson_t a;
    if (!BSON_ITER_HOLDS_ARRAY(b) || !sbl_iter_array(b, &a) || bson_count_keys(&a) != 2)
        return sbl_err_set(err, SBL_E_FailedToParse, "Window bounds must be a 2-element array");
    bson_iter_init(&arr, &a);
    bson_iter_next(&arr);
    SBL_RET(parse_bound(&arr, docs != NULL, unit != NULL, &o->lo, err));
    bson_iter_next(&arr);
    SBL_RET(parse_bound(&arr, docs != NULL, unit != NULL, &o->hi, err));
    if (o->lo.kind != WB_UNBOUNDED && o->hi.kind != WB_UNBOUNDED &&
        bound_num(&o->lo) > bound_num(&o->hi))
        return sbl_err_set(err, 5339900, "Lower bound must not exceed upper bound: [%g, %g]",
                           bound_num(&o->lo), bound_num(&o->hi));
    o->has_window = true;
    if (docs != NULL) {
        if (!ws->has_sort && !(o->lo.kind == WB_UNBOUNDED && o->hi.kind == WB_UNBOUNDED))
            return sbl_err_set(err, 5339901, "Document-based bounds require a sortBy");
        return 0;
    }
    o->range = true;
    if (unit != NULL) {
        o->has_unit = true;
        if (sbl_window_unit_ms(unit, &o->unit_ms, &o->unit_months) != 0)
            return sbl_err_set(err, SBL_E_FailedToParse, "unknown time unit value: %s", unit);
    }
    if (!ws->single)
        return sbl_err_set(err, 5339902, "Range-based bounds require sortBy a single field");
    if (ws->descending)
        return sbl_err_set(err, 8947401, "Range-based bounds require an ascending sortBy");
    return 0;
}

/* {input, unit} of $derivative / $integral, {input, N | alpha} of $expMovingAvg,
 * {output, by, default} of $shift. */
static int parse_object_arg(const char *name, const bson_iter_t *it, wout_t *o, sbl_err_t *err)
{
    bson_iter_t f;
    bson_value_t v;
    bool has_n = false, has_alpha = false, has_by = false;
    if (!BSON_ITER_HOLDS_DOCUMENT(it))
        return sbl_err_set(err, SBL_E_FailedToParse, "%s must have exactly one argument that is "
                                                     "an object",
                           name);
    bson_iter_recurse(it, &f);
    while (bson_iter_next(&f)) {
        const char *k = bson_iter_key(&f);
        sbl_iter_value(&f, &v);
        if ((strcmp(k, "input") == 0 && o->fn != W_SHIFT) ||
            (strcmp(k, "output") == 0 && o->fn == W_SHIFT)) {
            sbl_expr_free(o->e); /* a repeated field: the last one counts */
            o->e = NULL;
            SBL_RET(sbl_expr_parse(&v, &o->e, err));
        } else if (strcmp(k, "unit") == 0 && (o->fn == W_DERIV || o->fn == W_INTEGRAL)) {
            int months;
            if (!BSON_ITER_HOLDS_UTF8(&f))
                return sbl_err_set(err, SBL_E_FailedToParse, "%s 'unit' must be a string", name);
            if (sbl_window_unit_ms(bson_iter_utf8(&f, NULL), &o->fn_unit_ms, &months) != 0)
                return sbl_err_set(err, SBL_E_FailedToParse, "unknown time unit value: %s",
                                   bson_iter_utf8(&f, NULL));
            if (months != 0)
                return sbl_err_set(err, 5490704, "%s 'unit' must be a fixed unit (week or "
                                                 "smaller), not %s",
                                   name, bson_iter_utf8(&f, NULL));
        } else if (strcmp(k, "N") == 0 && o->fn == W_EMA) {
            double d = sbl_number_double(&v);
            if (!BSON_ITER_HOLDS_NUMBER(&f) || d != floor(d))
                return sbl_err_set(err, SBL_E_FailedToParse, "'N' field must be an integer");
            if (d <= 0)
                return sbl_err_set(err, SBL_E_FailedToParse, "'N' must be greater than zero. "
                                                             "Got %lld",
                                   (long long)d);
            o->alpha = 2.0 / (d + 1.0);
            has_n = true;
        } else if (strcmp(k, "alpha") == 0 && o->fn == W_EMA) {
            double d = sbl_number_double(&v);
            if (!BSON_ITER_HOLDS_NUMBER(&f) && !BSON_ITER_HOLDS_DECIMAL128(&f))
                return sbl_err_set(err, SBL_E_FailedToParse, "'alpha' must be a number");
            if (!(d > 0 && d < 1))
                return sbl_err_set(err, SBL_E_FailedToParse, "'alpha' must be between 0 and 1 "
                                                             "(exclusive), found %g",
                                   d);
            o->alpha = d;
            has_alpha = true;
        } else if (strcmp(k, "by") == 0 && o->fn == W_SHIFT) {
            double d = sbl_number_double(&v);
            if ((!BSON_ITER_HOLDS_NUMBER(&f) && !BSON_ITER_HOLDS_DECIMAL128(&f)) ||
                d != floor(d) || fabs(d) > 2147483647.0)
                return sbl_err_set(err, SBL_E_FailedToParse, "'$shift:by' field must be an "
                                                             "integer, but found %s",
                                   sbl_type_name(bson_iter_type(&f)));
            o->shift_by = (int64_t)d;
            has_by = true;
        } else if (strcmp(k, "default") == 0 && o->fn == W_SHIFT) {
            sbl_expr_t *d = NULL;
            SBL_RET(sbl_expr_parse(&v, &d, err));
            bool konst = sbl_expr_is_const(d);
            sbl_expr_free(d);
            if (!konst)
                return sbl_err_set(err, SBL_E_FailedToParse, "'$shift:default' expression must "
                                                             "yield a constant value.");
            bson_value_destroy(&o->dflt);
            bson_value_copy(&v, &o->dflt);
        } else {
            return sbl_err_set(err, SBL_E_FailedToParse, "%s got unexpected argument: %s", name,
                               k);
        }
    }
    if (o->e == NULL)
        return sbl_err_set(err, SBL_E_FailedToParse, "%s requires an '%s' expression", name,
                           o->fn == W_SHIFT ? "output" : "input");
    if (o->fn == W_EMA && has_n == has_alpha)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "$expMovingAvg sub object must have exactly two fields: An 'input' "
                           "field, and either an 'N' field or an 'alpha' field");
    if (o->fn == W_SHIFT && !has_by)
        return sbl_err_set(err, SBL_E_FailedToParse, "$shift requires a 'by' field");
    return 0;
}

static bool is_rank(wfn_t fn)
{
    return fn == W_RANK || fn == W_DENSE || fn == W_DOCNUM;
}

/* Functions that look at the partition in order and take no window. */
static bool no_window(wfn_t fn)
{
    return is_rank(fn) || fn == W_SHIFT || fn == W_EMA || fn == W_LOCF || fn == W_LINFILL;
}

/* One output field: {<function>: <args>, window: {...}}. */
static int parse_output(const char *path, const bson_iter_t *it, const wsort_t *ws, wout_t *o,
                        sbl_err_t *err)
{
    bson_iter_t f, win;
    bool has_win = false;
    const char *name = NULL;
    bson_value_t arg;
    o->path = path;
    o->dflt.value_type = BSON_TYPE_NULL;
    if (path[0] == '$')
        return sbl_err_set(err, 16410, "FieldPath field names may not start with '$'. Consider "
                                       "using $getField or $setField.");
    if (path[0] == '\0' || path[strlen(path) - 1] == '.' || strstr(path, "..") != NULL)
        return sbl_err_set(err, 40352, "FieldPath cannot be constructed with empty string");
    if (!BSON_ITER_HOLDS_DOCUMENT(it))
        return sbl_err_set(err, SBL_E_FailedToParse, "The field '%s' must be an object", path);
    bson_iter_recurse(it, &f);
    while (bson_iter_next(&f)) {
        const char *k = bson_iter_key(&f);
        if (strcmp(k, "window") == 0) {
            if (has_win)
                return sbl_err_set(err, SBL_E_FailedToParse, "saw multiple 'window' fields");
            win = f;
            has_win = true;
        } else if (k[0] == '$' && name == NULL) {
            int fn = find_fn(k);
            if (fn < 0)
                return sbl_err_set(err, SBL_E_FailedToParse, "Unrecognized window function, %s",
                                   k);
            name = k;
            o->fn = (wfn_t)fn;
            sbl_iter_value(&f, &arg);
        } else if (name != NULL) {
            return sbl_err_set(err, SBL_E_FailedToParse, "%s got unexpected argument: %s", name,
                               k);
        }
    }
    if (name == NULL)
        return sbl_err_set(err, SBL_E_FailedToParse, "Expected a $-prefixed window function");
    if (no_window(o->fn) && has_win)
        return sbl_err_set(err, is_rank(o->fn) ? 5371601 : SBL_E_FailedToParse,
                           "%s does not accept a 'window' field", name);
    if (is_rank(o->fn)) {
        if (arg.value_type != BSON_TYPE_DOCUMENT || arg.value.v_doc.data_len != 5)
            return sbl_err_set(err, 5371603, "%s must be specified with '{}' as the value", name);
        if (!ws->single)
            return sbl_err_set(err, 5371602, "%s must be specified with a top level sortBy "
                                             "expression with exactly one element",
                               name);
        return 0;
    }
    if ((o->fn == W_SHIFT || o->fn == W_EMA || o->fn == W_DERIV || o->fn == W_LINFILL) &&
        !ws->has_sort)
        return sbl_err_set(err, o->fn == W_LINFILL ? 605001 : SBL_E_FailedToParse,
                           "%s requires an explicit 'sortBy'", name);
    if ((o->fn == W_DERIV || o->fn == W_INTEGRAL || o->fn == W_LINFILL) && !ws->single)
        return sbl_err_set(err, o->fn == W_LINFILL ? 605001 : SBL_E_FailedToParse,
                           "%s requires a sortBy with exactly one field", name);
    if (has_win)
        SBL_RET(parse_window(&win, o, ws, err));
    if (o->fn == W_DERIV && !has_win)
        return sbl_err_set(err, SBL_E_FailedToParse, "$derivative requires explicit window "
                                                     "bounds");
    if (o->fn == W_SHIFT || o->fn == W_EMA || o->fn == W_DERIV || o->fn == W_INTEGRAL) {
        bson_iter_t a;
        bson_t wrap = BSON_INITIALIZER;
        sbl_append_value(&wrap, "a", 1, &arg);
        bson_iter_init_find(&a, &wrap, "a");
        int rc = parse_object_arg(name, &a, o, err);
        bson_destroy(&wrap);
        return rc;
    }
    if (o->fn == W_COVPOP || o->fn == W_COVSAMP) {
        bson_t a;
        bson_iter_t ai;
        bson_value_t x, y;
        if (arg.value_type != BSON_TYPE_ARRAY ||
            !bson_init_static(&a, arg.value.v_doc.data, arg.value.v_doc.data_len) ||
            bson_count_keys(&a) != 2)
            return sbl_err_set(err, SBL_E_FailedToParse, "%s requires an array of two "
                                                         "expressions",
                               name);
        bson_iter_init(&ai, &a);
        bson_iter_next(&ai);
        sbl_iter_value(&ai, &x);
        bson_iter_next(&ai);
        sbl_iter_value(&ai, &y);
        SBL_RET(sbl_expr_parse(&x, &o->e, err));
        return sbl_expr_parse(&y, &o->e2, err);
    }
    if (o->fn == W_PERCENTILE || o->fn == W_MEDIAN) { /* $group's argument and errors */
        bson_value_t input;
        SBL_RET(sbl_pct_parse(name, &arg, o->fn == W_MEDIAN ? 7436100 : 7429703, &o->pct,
                              &input, err));
        return sbl_expr_parse(&input, &o->e, err);
    }
    if (o->fn == W_COUNT) {
        if (arg.value_type != BSON_TYPE_DOCUMENT || arg.value.v_doc.data_len != 5)
            return sbl_err_set(err, SBL_E_FailedToParse, "$count only accepts an empty object "
                                                         "as input");
        return 0;
    }
    return sbl_expr_parse(&arg, &o->e, err);
}

/* ---- the stage ----------------------------------------------------------------------------- */

typedef struct went {
    bson_t *doc;
    uint8_t *pkey; /* the partition's value, encoded (0x00: missing) */
    size_t plen, seq;
} went_t;

static _Thread_local const sbl_sort_t *tls_wsort;

static int cmp_went(const void *a, const void *b)
{
    const went_t *x = a, *y = b;
    size_t n = x->plen < y->plen ? x->plen : y->plen;
    int r = memcmp(x->pkey, y->pkey, n);
    if (r == 0 && x->plen != y->plen)
        r = x->plen < y->plen ? -1 : 1;
    if (r == 0 && tls_wsort != NULL)
        r = sbl_sort_compare(tls_wsort, x->doc, y->doc);
    if (r == 0)
        r = x->seq < y->seq ? -1 : x->seq > y->seq;
    return r;
}

static void wout_free(wout_t *o)
{
    sbl_expr_free(o->e);
    sbl_expr_free(o->e2);
    bson_value_destroy(&o->dflt);
    sbl_pct_free(&o->pct);
}

static int parse_stage(const bson_t *spec, sbl_expr_t **partp, sbl_sort_t **sortp,
                       wsort_t *ws, wout_t **outsp, size_t *noutp, sbl_err_t *err)
{
    bson_iter_t it, out_it;
    bool has_output = false;
    bson_iter_init(&it, spec);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "partitionBy") == 0) {
            bson_value_t v;
            sbl_iter_value(&it, &v);
            SBL_RET(sbl_expr_parse(&v, partp, err));
        } else if (strcmp(k, "sortBy") == 0) {
            bson_t s;
            if (!sbl_iter_doc(&it, &s))
                return sbl_err_set(err, SBL_E_TypeMismatch,
                                   "BSON field '$setWindowFields.sortBy' is the wrong type '%s', "
                                   "expected type 'object'",
                                   sbl_type_name(bson_iter_type(&it)));
            if ((*sortp = sbl_sort_new(&s, err)) == NULL)
                return err->code ? err->code : sbl_err_set(err, SBL_E_BadValue, "bad sortBy");
            bson_iter_t f;
            ws->has_sort = !bson_empty(&s);
            ws->single = bson_count_keys(&s) == 1 && bson_iter_init(&f, &s) &&
                         bson_iter_next(&f) && BSON_ITER_HOLDS_NUMBER(&f);
            if (ws->single) {
                ws->field = bson_iter_key(&f);
                ws->descending = bson_iter_as_double(&f) < 0;
            }
        } else if (strcmp(k, "output") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                return sbl_err_set(err, SBL_E_TypeMismatch,
                                   "BSON field '$setWindowFields.output' is the wrong type '%s', "
                                   "expected type 'object'",
                                   sbl_type_name(bson_iter_type(&it)));
            out_it = it;
            has_output = true;
        } else {
            return sbl_err_set(err, 40415, "BSON field '$setWindowFields.%s' is an unknown "
                                           "field.",
                               k);
        }
    }
    if (!has_output)
        return sbl_err_set(err, 40414, "BSON field '$setWindowFields.output' is missing but a "
                                       "required field");
    bson_iter_t f;
    size_t n = 0;
    bson_iter_recurse(&out_it, &f);
    while (bson_iter_next(&f))
        n++;
    *outsp = calloc(n + 1, sizeof(**outsp));
    bson_iter_recurse(&out_it, &f);
    while (bson_iter_next(&f)) {
        wout_t *o = &(*outsp)[(*noutp)++];
        SBL_RET(parse_output(bson_iter_key(&f), &f, ws, o, err));
    }
    return 0;
}

/* Compute every output over one partition and set the fields; partition bytes
 * past the limit fail unless the disk may be used. */
static int run_partition(const sbl_agg_env_t *env, const wsort_t *ws, const wout_t *outs,
                         size_t nout, went_t *e, size_t n, sbl_err_t *err)
{
    wpart_t p = {.n = n};
    size_t bytes = 0;
    int rc = 0;
    p.docs = malloc((n + 1) * sizeof(*p.docs));
    p.sv = calloc(n + 1, sizeof(*p.sv));
    p.tie = calloc(n + 1, sizeof(*p.tie));
    bson_value_t *vals = calloc(n * nout + 1, sizeof(*vals));
    for (size_t i = 0; i < n; i++) {
        bson_iter_t at;
        p.docs[i] = e[i].doc;
        bytes += e[i].doc->len + 64;
        if (ws->single && sbl_path_get(e[i].doc, ws->field, &at))
            sbl_iter_value(&at, &p.sv[i]);
        p.tie[i] = i > 0 && tls_wsort != NULL &&
                   sbl_sort_compare(tls_wsort, e[i - 1].doc, e[i].doc) == 0;
    }
    size_t limit = sbl_mem_limit(SBL_LIM_WINDOW);
    for (size_t k = 0; rc == 0 && k < nout; k++) {
        rc = sbl_window_compute(env, &outs[k], &p, vals + k * n, &bytes, err);
        if (rc == 0 && bytes > limit && !sbl_mem_disk_ok(env->allow_disk))
            rc = sbl_err_set(err, 5643011, "Exceeded max memory. Set 'allowDiskUse: true' to "
                                           "spill to disk");
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        for (size_t k = 0; k < nout; k++) {
            bson_t *next = bson_new();
            bson_value_t *v = &vals[k * n + i];
            sbl_agg_set_path(e[i].doc, outs[k].path, v, next);
            bson_destroy(e[i].doc);
            e[i].doc = next;
        }
    }
    for (size_t i = 0; i < n * nout; i++)
        if (vals[i].value_type != BSON_TYPE_EOD)
            bson_value_destroy(&vals[i]);
    free(vals);
    free(p.docs);
    free(p.sv);
    free(p.tie);
    return rc;
}

int sbl_agg_set_window_fields(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_iter_t *it,
                              sbl_err_t *err)
{
    bson_t spec;
    sbl_expr_t *part = NULL;
    sbl_sort_t *sort = NULL;
    wsort_t ws = {0};
    wout_t *outs = NULL;
    size_t nout = 0;
    if (!BSON_ITER_HOLDS_DOCUMENT(it))
        return sbl_err_set(err, SBL_E_FailedToParse, "the $setWindowFields stage specification "
                                                     "must be an object, found %s",
                           sbl_type_name(bson_iter_type(it)));
    sbl_iter_doc(it, &spec);
    int rc = parse_stage(&spec, &part, &sort, &ws, &outs, &nout, err);
    if (rc == 0 && sort != NULL)
        sbl_sort_set_collation(sort, env->coll);

    went_t *e = calloc(dv->n + 1, sizeof(*e));
    for (size_t i = 0; rc == 0 && i < dv->n; i++) {
        sbl_buf_t b;
        sbl_buf_init(&b);
        e[i].doc = dv->v[i];
        e[i].seq = i;
        if (part != NULL) {
            bson_value_t v;
            if ((rc = sbl_agg_eval(env, part, dv->v[i], &v, err)) != 0) {
                sbl_buf_destroy(&b);
                break;
            }
            if (v.value_type == BSON_TYPE_ARRAY)
                rc = sbl_err_set(err, 5340201, "An expression used to partition cannot evaluate "
                                               "to value of type array");
            uint8_t present = v.value_type != BSON_TYPE_EOD;
            sbl_buf_append(&b, &present, 1);
            if (present)
                sbl_key_append_coll(&b, &v, false, env->coll);
            bson_value_destroy(&v);
        }
        e[i].pkey = malloc(b.len + 1);
        memcpy(e[i].pkey, b.data, b.len);
        e[i].plen = b.len;
        sbl_buf_destroy(&b);
    }
    if (rc == 0) {
        tls_wsort = sort;
        qsort(e, dv->n, sizeof(*e), cmp_went);
        for (size_t b = 0; rc == 0 && b < dv->n;) {
            size_t end = b + 1;
            while (end < dv->n && e[end].plen == e[b].plen &&
                   memcmp(e[end].pkey, e[b].pkey, e[b].plen) == 0)
                end++;
            rc = run_partition(env, &ws, outs, nout, e + b, end - b, err);
            if (rc == 0)
                rc = sbl_op_check_interrupt(env->ctx, err);
            b = end;
        }
        tls_wsort = NULL;
        for (size_t i = 0; i < dv->n; i++)
            dv->v[i] = e[i].doc; /* the stage's order: by partition, then sortBy */
    }
    for (size_t i = 0; i < dv->n; i++)
        free(e[i].pkey);
    free(e);
    for (size_t k = 0; k < nout; k++)
        wout_free(&outs[k]);
    free(outs);
    sbl_expr_free(part);
    sbl_sort_free(sort);
    return rc;
}
