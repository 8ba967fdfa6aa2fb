/*
 * expr_parse.c: parsing an expression specification into the tree:
 * strings (constants, $field paths, $$variables), {$op: args} (operators
 * found in the sorted table, their arguments positional or named, with the
 * special parsers of $literal, $let and $switch), objects and arrays; and
 * freeing a tree.
 *
 * What must stay true: a parse that fails frees everything it made and
 * leaves *exprp NULL; nesting deeper than EXPR_MAX_DEPTH is refused
 * (Overflow) before it recurses further; variable names follow MongoDB's
 * rules (16869-16871).
 */
#include "expr/expr_int.h"

#include <string.h>

#include "doc/doc.h"

/* ---- parsing ---------------------------------------------------------------------- */

static int parse_at(const bson_value_t *spec, sbl_expr_t **ep, int depth, sbl_err_t *err);

static sbl_expr_t *node_new(enum expr_kind k)
{
    sbl_expr_t *e = bson_malloc0(sizeof(*e));
    e->kind = k;
    e->cval.value_type = BSON_TYPE_EOD;
    return e;
}

void sbl_expr_free(sbl_expr_t *e)
{
    if (e == NULL)
        return;
    bson_value_destroy(&e->cval);
    bson_free(e->var);
    bson_free(e->path);
    for (size_t i = 0; i < e->n; i++) {
        sbl_expr_free(e->kids[i]);
        if (e->names != NULL)
            bson_free(e->names[i]);
    }
    bson_free(e->kids);
    bson_free(e->names);
    bson_free(e);
}

static void add_kid(sbl_expr_t *e, const char *name, sbl_expr_t *kid)
{
    e->kids = bson_realloc(e->kids, (e->n + 1) * sizeof(*e->kids));
    if (name != NULL || e->names != NULL) {
        e->names = bson_realloc(e->names, (e->n + 1) * sizeof(*e->names));
        e->names[e->n] = name ? bson_strdup(name) : NULL;
    }
    e->kids[e->n++] = kid;
}

int ex_check_var_name(const char *name, bool defining, sbl_err_t *err)
{
    if (name[0] == '\0')
        return sbl_err_set(err, 16869, "empty variable names are not allowed");
    unsigned char c0 = (unsigned char)name[0];
    if (!(c0 >= 'a' && c0 <= 'z') && c0 < 0x80 && !(!defining && c0 >= 'A' && c0 <= 'Z'))
        return sbl_err_set(err, 16870,
                           "'%s' starts with an invalid character for a user variable name",
                           name);
    for (const char *p = name; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (!(ch >= 'a' && ch <= 'z') && !(ch >= 'A' && ch <= 'Z') && !(ch >= '0' && ch <= '9') &&
            ch != '_' && ch < 0x80)
            return sbl_err_set(err, 16871,
                               "'%s' contains an invalid character for a variable name: '%c'",
                               name, *p);
    }
    return 0;
}

static int parse_string(const char *s, sbl_expr_t **ep, sbl_err_t *err)
{
    sbl_expr_t *e;
    if (s[0] != '$') {
        e = node_new(E_CONST);
        e->cval.value_type = BSON_TYPE_UTF8;
        v_str(&e->cval, s, strlen(s));
        *ep = e;
        return 0;
    }
    if (s[1] == '$') {
        const char *name = s + 2, *dot = strchr(name, '.');
        size_t len = dot ? (size_t)(dot - name) : strlen(name);
        e = node_new(E_VAR);
        e->var = bson_strndup(name, len);
        if (dot != NULL)
            e->path = bson_strdup(dot + 1);
        int rc = ex_check_var_name(e->var, false, err);
        if (rc != 0) {
            sbl_expr_free(e);
            return rc;
        }
        *ep = e;
        return 0;
    }
    if (s[1] == '\0')
        return sbl_err_set(err, 16872, "'$' by itself is not a valid FieldPath");
    for (const char *p = s + 1; *p; p++) {
        if (*p == '.' && (p[1] == '.' || p[1] == '\0' || p == s + 1))
            return sbl_err_set(err, 15998, "FieldPath field names may not be empty strings.");
        if (*p == '$' && (p == s + 1 || p[-1] == '.'))
            return sbl_err_set(err, 16410, "FieldPath field names may not start with '$'. "
                                           "Consider using $getField or $setField.");
    }
    e = node_new(E_FIELD);
    e->path = bson_strdup(s + 1);
    *ep = e;
    return 0;
}

/* Arguments given as named fields ({input: ..., as: ...}). */
static int parse_named(const op_def_t *op, const bson_value_t *arg, sbl_expr_t *e, int depth,
                       sbl_err_t *err)
{
    bson_t d;
    bson_iter_t it;
    size_t n = 0;
    while (op->named[n] != NULL)
        n++;
    e->n = n;
    e->kids = bson_malloc0(n * sizeof(*e->kids));
    if (arg->value_type != BSON_TYPE_DOCUMENT || !v_doc(arg, &d))
        return sbl_err_set(err, 10065,
                           "%s only supports an object as its argument", op->name);
    bson_iter_init(&it, &d);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        size_t i;
        for (i = 0; i < n; i++) {
            const char *nm = op->named[i] + (op->named[i][0] == '*');
            if (strcmp(nm, k) == 0)
                break;
        }
        if (i == n)
            return sbl_err_set(err, 17083, "Unrecognized parameter to %s: %s", op->name, k);
        bson_value_t v;
        sbl_iter_value(&it, &v);
        sbl_expr_free(e->kids[i]);
        e->kids[i] = NULL;
        SBL_RET(parse_at(&v, &e->kids[i], depth + 1, err));
    }
    for (size_t i = 0; i < n; i++)
        if (op->named[i][0] == '*' && e->kids[i] == NULL)
            return sbl_err_set(err, 17080, "Missing '%s' parameter to %s", op->named[i] + 1,
                               op->name);
    return 0;
}

static int parse_op(const char *name, const bson_value_t *arg, sbl_expr_t **ep, int depth,
                    sbl_err_t *err)
{
    const op_def_t *op = ex_find_op(name);
    if (op == NULL)
        return sbl_err_set(err, 168, "Unrecognized expression '%s'", name);
    sbl_expr_t *e = node_new(E_OP);
    e->op = op;
    int rc;
    if (op->parse != NULL) {
        rc = op->parse(op, arg, e, err);
    } else if (op->named != NULL &&
               (op->max_args == 0 || arg->value_type == BSON_TYPE_DOCUMENT)) {
        bson_t d;
        bson_iter_t it;
        /* A one-argument op given an operator expression is positional. */
        if (op->max_args != 0 && v_doc(arg, &d) && bson_iter_init(&it, &d) && bson_iter_next(&it) &&
            bson_iter_key(&it)[0] == '$')
            goto positional;
        rc = parse_named(op, arg, e, depth, err);
    } else if (op->max_args == 0 &&
               ((arg->value_type == BSON_TYPE_DOCUMENT || arg->value_type == BSON_TYPE_ARRAY) &&
                arg->value.v_doc.data_len == 5)) {
        rc = 0; /* {$rand: {}} and {$rand: []}: no arguments */
    } else {
    positional:;
        bson_t d;
        bson_iter_t it;
        if (arg->value_type == BSON_TYPE_ARRAY && v_doc(arg, &d)) {
            bson_iter_init(&it, &d);
            rc = 0;
            while (rc == 0 && bson_iter_next(&it)) {
                bson_value_t v;
                sbl_expr_t *k = NULL;
                sbl_iter_value(&it, &v);
                if ((rc = parse_at(&v, &k, depth + 1, err)) == 0)
                    add_kid(e, NULL, k);
            }
        } else {
            sbl_expr_t *k = NULL;
            if ((rc = parse_at(arg, &k, depth + 1, err)) == 0)
                add_kid(e, NULL, k);
        }
        if (rc == 0 && ((int)e->n < op->min_args || (op->max_args >= 0 && (int)e->n > op->max_args))) {
            if (op->min_args == op->max_args)
                rc = sbl_err_set(err, 16020, "Expression %s takes exactly %d arguments. %zu were "
                                             "passed in.",
                                 op->name, op->min_args, e->n);
            else if (op->max_args < 0)
                rc = sbl_err_set(err, 16021, "Expression %s takes at least %d arguments, but "
                                             "%zu were passed in.",
                                 op->name, op->min_args, e->n);
            else
                rc = sbl_err_set(err, 28667, "Expression %s takes at least %d arguments, and at "
                                             "most %d, but %zu were passed in.",
                                 op->name, op->min_args, op->max_args, e->n);
        }
    }
    if (rc != 0) {
        sbl_expr_free(e);
        return rc;
    }
    *ep = e;
    return 0;
}

int parse_literal(const op_def_t *op, const bson_value_t *arg, sbl_expr_t *e, sbl_err_t *err)
{
    sbl_expr_t *k = node_new(E_CONST);
    v_copy(arg, &k->cval);
    add_kid(e, NULL, k);
    return 0;
}

int parse_meta(const op_def_t *op, const bson_value_t *arg, sbl_expr_t *e, sbl_err_t *err)
{
    if (arg->value_type != BSON_TYPE_UTF8)
        return sbl_err_set(err, 17307, "$meta only supports string arguments");
    if (strcmp(arg->value.v_utf8.str, "textScore") != 0)
        return sbl_err_set(err, 17308, "Unsupported argument to $meta: %s",
                           arg->value.v_utf8.str);
    return 0;
}

int parse_let(const op_def_t *op, const bson_value_t *arg, sbl_expr_t *e, sbl_err_t *err)
{
    bson_t d, vars;
    bson_iter_t it;
    bson_value_t in_v;
    bool has_vars = false, has_in = false;
    if (!v_doc(arg, &d) || arg->value_type != BSON_TYPE_DOCUMENT)
        return sbl_err_set(err, 16874, "$let only supports an object as its argument");
    bson_iter_init(&it, &d);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "vars") == 0) {
            bson_value_t v;
            sbl_iter_value(&it, &v);
            if (v.value_type != BSON_TYPE_DOCUMENT || !v_doc(&v, &vars))
                return sbl_err_set(err, 10065, "invalid parameter: expected an object (vars)");
            has_vars = true;
        } else if (strcmp(k, "in") == 0) {
            sbl_iter_value(&it, &in_v);
            has_in = true;
        } else {
            return sbl_err_set(err, 16875, "Unrecognized parameter to $let: %s", k);
        }
    }
    if (!has_vars)
        return sbl_err_set(err, 16876, "Missing 'vars' parameter to $let");
    if (!has_in)
        return sbl_err_set(err, 16877, "Missing 'in' parameter to $let");
    bson_iter_init(&it, &vars);
    while (bson_iter_next(&it)) {
        bson_value_t v;
        sbl_expr_t *k = NULL;
        SBL_RET(ex_check_var_name(bson_iter_key(&it), true, err));
        sbl_iter_value(&it, &v);
        SBL_RET(parse_at(&v, &k, 1, err));
        add_kid(e, bson_iter_key(&it), k);
    }
    sbl_expr_t *k = NULL;
    SBL_RET(parse_at(&in_v, &k, 1, err));
    add_kid(e, "", k); /* the body is the last kid */
    return 0;
}

int parse_switch(const op_def_t *op, const bson_value_t *arg, sbl_expr_t *e, sbl_err_t *err)
{
    bson_t d, br;
    bson_iter_t it, bi;
    bool has_branches = false;
    sbl_expr_t *dflt = NULL;
    if (arg->value_type != BSON_TYPE_DOCUMENT || !v_doc(arg, &d))
        return sbl_err_set(err, 40060, "$switch requires an object as an argument, found: %s",
                           sbl_type_name(arg->value_type));
    bson_iter_init(&it, &d);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        bson_value_t v;
        sbl_iter_value(&it, &v);
        if (strcmp(k, "branches") == 0) {
            if (v.value_type != BSON_TYPE_ARRAY || !v_doc(&v, &br))
                return sbl_err_set(err, 40061, "$switch expected an array for 'branches', "
                                               "found: %s",
                                   sbl_type_name(v.value_type));
            bson_iter_init(&bi, &br);
            while (bson_iter_next(&bi)) {
                bson_t b;
                bson_iter_t f;
                bson_value_t bv;
                sbl_expr_t *c = NULL, *t = NULL;
                sbl_iter_value(&bi, &bv);
                if (bv.value_type != BSON_TYPE_DOCUMENT || !v_doc(&bv, &b))
                    return sbl_err_set(err, 40062, "$switch expected each branch to be an "
                                                   "object, found: %s",
                                       sbl_type_name(bv.value_type));
                bson_iter_init(&f, &b);
                int rc = 0;
                while (rc == 0 && bson_iter_next(&f)) {
                    bson_value_t fv;
                    sbl_iter_value(&f, &fv);
                    if (strcmp(bson_iter_key(&f), "case") == 0 && c == NULL)
                        rc = parse_at(&fv, &c, 1, err);
                    else if (strcmp(bson_iter_key(&f), "then") == 0 && t == NULL)
                        rc = parse_at(&fv, &t, 1, err);
                    else
                        rc = sbl_err_set(err, 40063, "$switch found an unknown argument to a "
                                                     "branch: %s",
                                         bson_iter_key(&f));
                }
                if (rc == 0 && c == NULL)
                    rc = sbl_err_set(err, 40064, "$switch requires each branch have a 'case' "
                                                 "expression");
                if (rc == 0 && t == NULL)
                    rc = sbl_err_set(err, 40065, "$switch requires each branch have a 'then' "
                                                 "expression.");
                if (rc != 0) {
                    sbl_expr_free(c);
                    sbl_expr_free(t);
                    sbl_expr_free(dflt);
                    return rc;
                }
                add_kid(e, "case", c);
                add_kid(e, "then", t);
            }
            has_branches = true;
        } else if (strcmp(k, "default") == 0) {
            sbl_expr_free(dflt);
            dflt = NULL;
            SBL_RET(parse_at(&v, &dflt, 1, err));
        } else {
            sbl_expr_free(dflt);
            return sbl_err_set(err, 40067, "$switch found an unknown argument: %s", k);
        }
    }
    if (!has_branches || e->n == 0) {
        sbl_expr_free(dflt);
        return sbl_err_set(err, 40068, "$switch requires at least one branch.");
    }
    add_kid(e, "default", dflt); /* may be NULL */
    return 0;
}

static int parse_object(const bson_t *d, sbl_expr_t **ep, int depth, sbl_err_t *err)
{
    bson_iter_t it;
    if (!bson_iter_init(&it, d))
        return sbl_err_set(err, SBL_E_InvalidBSON, "invalid expression");
    if (bson_iter_next(&it) && bson_iter_key(&it)[0] == '$') {
        const char *name = bson_iter_key(&it);
        bson_value_t arg;
        sbl_iter_value(&it, &arg);
        if (bson_iter_next(&it))
            return sbl_err_set(err, 15983, "an expression specification must contain exactly "
                                           "one field, the name of the expression. Found %u "
                                           "fields in %s",
                               bson_count_keys(d), name);
        return parse_op(name, &arg, ep, depth, err);
    }
    sbl_expr_t *e = node_new(E_OBJECT);
    e->all_const = true;
    bson_iter_init(&it, d);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        bson_value_t v;
        sbl_expr_t *kid = NULL;
        int rc = 0;
        if (k[0] == '$')
            rc = sbl_err_set(err, 16404, "a user object field name may not start with '$': %s",
                             k);
        else if (strchr(k, '.') != NULL)
            rc = sbl_err_set(err, 16412, "FieldPath field names may not contain '.'.");
        if (rc == 0) {
            sbl_iter_value(&it, &v);
            rc = parse_at(&v, &kid, depth + 1, err);
        }
        if (rc != 0) {
            sbl_expr_free(e);
            return rc;
        }
        if (!sbl_expr_is_const(kid))
            e->all_const = false;
        add_kid(e, k, kid);
    }
    *ep = e;
    return 0;
}

static int parse_at(const bson_value_t *spec, sbl_expr_t **ep, int depth, sbl_err_t *err)
{
    *ep = NULL;
    if (depth > EXPR_MAX_DEPTH)
        return sbl_err_set(err, SBL_E_Overflow, "expression nesting exceeds %d levels",
                           EXPR_MAX_DEPTH);
    switch (spec->value_type) {
    case BSON_TYPE_UTF8:
        return parse_string(spec->value.v_utf8.str, ep, err);
    case BSON_TYPE_DOCUMENT: {
        bson_t d;
        if (!v_doc(spec, &d))
            return sbl_err_set(err, SBL_E_InvalidBSON, "invalid expression");
        return parse_object(&d, ep, depth, err);
    }
    case BSON_TYPE_ARRAY: {
        bson_t d;
        bson_iter_t it;
        sbl_expr_t *e = node_new(E_ARRAY);
        e->all_const = true;
        if (!v_doc(spec, &d) || !bson_iter_init(&it, &d)) {
            sbl_expr_free(e);
            return sbl_err_set(err, SBL_E_InvalidBSON, "invalid expression");
        }
        while (bson_iter_next(&it)) {
            bson_value_t v;
            sbl_expr_t *kid = NULL;
            sbl_iter_value(&it, &v);
            int rc = parse_at(&v, &kid, depth + 1, err);
            if (rc != 0) {
                sbl_expr_free(e);
                return rc;
            }
            if (!sbl_expr_is_const(kid))
                e->all_const = false;
            add_kid(e, NULL, kid);
        }
        *ep = e;
        return 0;
    }
    default: {
        sbl_expr_t *e = node_new(E_CONST);
        v_copy(spec, &e->cval);
        *ep = e;
        return 0;
    }
    }
}

int sbl_expr_parse(const bson_value_t *spec, sbl_expr_t **exprp, sbl_err_t *err)
{
    int rc = parse_at(spec, exprp, 0, err);
    if (rc != 0) {
        sbl_expr_free(*exprp);
        *exprp = NULL;
    }
    return rc;
}

int sbl_expr_parse_doc(const bson_t *spec, sbl_expr_t **exprp, sbl_err_t *err)
{
    bson_value_t v;
    v.value_type = BSON_TYPE_DOCUMENT;
    v.value.v_doc.data = (uint8_t *)bson_get_data(spec);
    v.value.v_doc.data_len = spec->len;
    return sbl_expr_parse(&v, exprp, err);
}

bool sbl_expr_is_const(const sbl_expr_t *e)
{
    return e->kind == E_CONST || ((e->kind == E_OBJECT || e->kind == E_ARRAY) && e->all_const) ||
           (e->kind == E_OP && e->op->eval == op_literal);
}
