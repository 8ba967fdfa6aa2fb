/*
 * project.c: find projections.  The specification is parsed once into a
 * tree of path parts (one pnode_t per part); applying it walks the document
 * and the tree together.
 *
 * What must stay true:
 *  - A projection is either inclusion or exclusion (only _id may disagree);
 *    $slice and $elemMatch do not decide, a literal value, an expression
 *    (a computed field) or "a.$" means inclusion.  Undecided specs are exclusion unless they hold $elemMatch
 *    or _id: 1.
 *  - Fields keep the document's order; literal and computed fields come
 *    after the document's fields at their level, in specification order
 *    (a computed field is a literal whose value each document computes,
 *    over the whole document, as $project's).
 *  - Through arrays, inclusion keeps only the sub-documents (and nested
 *    arrays) of an array, exclusion keeps every element.
 */
#include <string.h>

#include "doc/doc.h"
#include "query/query.h"
#include "query/query_int.h"

/* MongoDB's codes for projection errors (not in the shared table). */
#define E_PATH_COLLISION 31249
#define E_INCL_IN_EXCL 31253
#define E_EXCL_IN_INCL 31254
#define E_EMPTY_SUBPROJ 51270
#define E_MULTI_POSITIONAL 31276
#define E_POSITIONAL_NO_MATCH 51246
#define E_SLICE_ARG 28667
#define E_SLICE_LIMIT 28724
#define E_EXPR_IN_EXCL 31252      /* {$op: ...} in an exclusion projection */
#define E_LITERAL_IN_EXCL 31310   /* "$path" or a literal in one */
#define E_POSITIONAL_OBJECT 31271 /* "a.$": {...} */
#define E_POSITIONAL_LITERAL 31308
#define E_UNKNOWN_EXPR 31325
#define E_UNRECOGNIZED_EXPR 168   /* the expression parser's InvalidPipelineOperator */

enum {
    PA_NONE, PA_INCLUDE, PA_EXCLUDE, PA_SLICE, PA_ELEM, PA_POSITIONAL, PA_LITERAL, PA_META,
    PA_EXPR
};

typedef struct pnode pnode_t;
struct pnode {
    char *name;
    int action;            /* PA_NONE for an interior part */
    bool has_positional;   /* an "a.$" below or here */
    bool has_literal;      /* a literal or computed field below or here */
    bool meta_rid;         /* PA_META: {$meta: "recordId"} (else "textScore") */
    int64_t skip, limit;   /* PA_SLICE; has_skip when given as [skip, limit] */
    bool has_skip;
    bson_value_t lit;      /* PA_LITERAL, owned */
    sbl_matcher_t *em;     /* PA_ELEM: {name: {$elemMatch: spec}} */
    void *expr;            /* PA_EXPR: the expression module's plan */
    pnode_t **kids;
    size_t nkids;
};

struct sbl_projection {
    pnode_t *root;
    bool inclusion;
    bool id_excluded;
    bool empty;
    bool has_meta; /* a {$meta: "textScore"} field */
    bson_t *let;   /* the command's let values for PA_EXPR, owned; NULL: none */
};

/* Parses and evaluates computed fields (sbl_expr_init registers it). */
static const sbl_project_ext_t *proj_ext;

void sbl_projection_register_ext(const sbl_project_ext_t *ext)
{
    proj_ext = ext;
}

static void pnode_free(pnode_t *n)
{
    if (n == NULL)
        return;
    for (size_t i = 0; i < n->nkids; i++)
        pnode_free(n->kids[i]);
    bson_free(n->kids);
    bson_free(n->name);
    if (n->action == PA_LITERAL)
        bson_value_destroy(&n->lit);
    if (n->action == PA_EXPR && n->expr != NULL)
        proj_ext->free(n->expr);
    sbl_matcher_free(n->em);
    bson_free(n);
}

static pnode_t *pnode_child(const pnode_t *n, const char *name)
{
    for (size_t i = 0; i < n->nkids; i++)
        if (strcmp(n->kids[i]->name, name) == 0)
            return n->kids[i];
    return NULL;
}

void sbl_projection_free(sbl_projection_t *p)
{
    if (p == NULL)
        return;
    pnode_free(p->root);
    if (p->let != NULL)
        bson_destroy(p->let);
    bson_free(p);
}

/* ---- parsing ------------------------------------------------------------- */

typedef struct pparse {
    sbl_projection_t *p;
    int mode; /* 0 undecided, PA_INCLUDE or PA_EXCLUDE */
    bool any_elem, id_included, any_positional;
} pparse_t;

/* Find or create the leaf for path; fails on a collision with another path. */
static int tree_add(pnode_t *root, const char *path, pnode_t **leafp, sbl_err_t *err)
{
    pnode_t *n = root;
    const char *p = path;

    *leafp = NULL;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t len = dot != NULL ? (size_t)(dot - p) : strlen(p);
        char *name = bson_strndup(p, len);
        pnode_t *kid = pnode_child(n, name);

        if (len == 0) {
            bson_free(name);
            return sbl_err_set(err, SBL_E_BadValue,
                               "FieldPath field names may not be empty strings.");
        }
        if (kid != NULL && (kid->action != PA_NONE || dot == NULL)) {
            bson_free(name);
            return sbl_err_set(err, E_PATH_COLLISION, "Path collision at %s", path);
        }
        if (kid == NULL) {
            kid = bson_malloc0(sizeof(*kid));
            kid->name = name;
            n->kids = bson_realloc(n->kids, (n->nkids + 1) * sizeof(*n->kids));
            n->kids[n->nkids++] = kid;
        } else {
            bson_free(name);
        }
        n = kid;
        if (dot == NULL)
            break;
        p = dot + 1;
    }
    *leafp = n;
    return 0;
}

/* Mark has_positional / has_literal along path. */
static void tree_mark(pnode_t *root, const char *path, bool positional)
{
    pnode_t *n = root;
    char *copy = bson_strdup(path), *save = NULL;
    for (char *part = strtok_r(copy, ".", &save); part && n; part = strtok_r(NULL, ".", &save)) {
        n = pnode_child(n, part);
        if (n != NULL) {
            if (positional)
                n->has_positional = true;
            else
                n->has_literal = true;
        }
    }
    bson_free(copy);
}

static int set_mode(pparse_t *c, int mode, const char *path, sbl_err_t *err)
{
    if (c->mode != 0 && c->mode != mode)
        return mode == PA_EXCLUDE
                   ? sbl_err_set(err, E_EXCL_IN_INCL,
                                 "Cannot do exclusion on field %s in inclusion projection", path)
                   : sbl_err_set(err, E_INCL_IN_EXCL,
                                 "Cannot do inclusion on field %s in exclusion projection", path);
    c->mode = mode;
    return 0;
}

static bool as_int64(const bson_value_t *v, int64_t *out)
{
    switch (v->value_type) {
    case BSON_TYPE_INT32:
        *out = v->value.v_int32;
        return true;
    case BSON_TYPE_INT64:
        *out = v->value.v_int64;
        return true;
    case BSON_TYPE_DOUBLE:
        if (!(v->value.v_double > -9.2e18 && v->value.v_double < 9.2e18))
            return false;
        *out = (int64_t)v->value.v_double;
        return true;
    default:
        return false;
    }
}

static int parse_slice(pnode_t *leaf, const bson_value_t *v, sbl_err_t *err)
{
    leaf->action = PA_SLICE;
    if (as_int64(v, &leaf->limit))
        return 0;
    if (v->value_type == BSON_TYPE_ARRAY) {
        bson_t arr;
        bson_iter_t it;
        bson_value_t e[2];
        int n = 0;
        if (bson_init_static(&arr, v->value.v_doc.data, v->value.v_doc.data_len) &&
            bson_iter_init(&it, &arr)) {
            while (bson_iter_next(&it) && n < 3) {
                if (n < 2)
                    sbl_iter_value(&it, &e[n]);
                n++;
            }
        }
        if (n == 2 && as_int64(&e[0], &leaf->skip) && as_int64(&e[1], &leaf->limit)) {
            if (leaf->limit <= 0)
                return sbl_err_set(err, E_SLICE_LIMIT, "$slice limit must be positive");
            leaf->has_skip = true;
            return 0;
        }
    }
    return sbl_err_set(err, E_SLICE_ARG,
                       "$slice only supports numbers and [skip, limit] arrays");
}

static int parse_elem_match(pnode_t *leaf, const char *path, const bson_value_t *v,
                            sbl_err_t *err)
{
    bson_t filter, inner;

    if (strchr(path, '.') != NULL)
        return sbl_err_set(err, SBL_E_BadValue,
                           "Cannot use $elemMatch projection on a nested field.");
    if (v->value_type != BSON_TYPE_DOCUMENT)
        return sbl_err_set(err, SBL_E_BadValue, "elemMatch: Invalid argument, object required.");
    bson_init(&filter);
    bson_append_document_begin(&filter, path, -1, &inner);
    sbl_append_value(&inner, "$elemMatch", -1, v);
    bson_append_document_end(&filter, &inner);
    leaf->em = sbl_matcher_new(&filter, err);
    bson_destroy(&filter);
    if (leaf->em == NULL)
        return err != NULL ? err->code : SBL_E_BadValue;
    leaf->action = PA_ELEM;
    return 0;
}

static int parse_spec(pparse_t *c, const bson_t *spec, const char *prefix, sbl_err_t *err);

/* A literal or computed field makes the projection an inclusion one (mongod's codes). */
static int computed_mode(pparse_t *c, const char *path, bool object, sbl_err_t *err)
{
    if (c->mode == PA_EXCLUDE)
        return object ? sbl_err_set(err, E_EXPR_IN_EXCL,
                                    "Cannot use expression other than $meta in exclusion "
                                    "projection")
                      : sbl_err_set(err, E_LITERAL_IN_EXCL,
                                    "Cannot use an expression %s in an exclusion projection",
                                    path);
    c->mode = PA_INCLUDE;
    return 0;
}

/* A computed field at path: the expression v ("$path", "$$var" or {$op: ...}). */
static int add_computed(pparse_t *c, const char *path, const bson_value_t *v, sbl_err_t *err)
{
    pnode_t *leaf;
    bool object = v->value_type == BSON_TYPE_DOCUMENT;
    SBL_RET(computed_mode(c, path, object, err));
    if (proj_ext == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "projection expressions are not available here "
                           "(%s)", path);
    void *plan = proj_ext->parse(v, err);
    if (plan == NULL && object && err->code == E_UNRECOGNIZED_EXPR) {
        bson_iter_t it;
        bson_t d;
        bson_init_static(&d, v->value.v_doc.data, v->value.v_doc.data_len);
        return sbl_err_set(err, E_UNKNOWN_EXPR, "Unknown expression %s",
                           bson_iter_init(&it, &d) && bson_iter_next(&it) ? bson_iter_key(&it)
                                                                          : "");
    }
    if (plan == NULL)
        return err->code != 0 ? err->code : sbl_err_set(err, SBL_E_BadValue, "bad expression");
    int rc = tree_add(c->p->root, path, &leaf, err);
    if (rc != 0) {
        proj_ext->free(plan);
        return rc;
    }
    leaf->action = PA_EXPR;
    leaf->expr = plan;
    tree_mark(c->p->root, path, false);
    return 0;
}

/* One path: value pair of the specification. */
static int parse_entry(pparse_t *c, const char *path, const bson_value_t *v, sbl_err_t *err)
{
    pnode_t *leaf;
    size_t plen = strlen(path);
    bool positional = plen >= 2 && strcmp(path + plen - 2, ".$") == 0;
    char *real = positional ? bson_strndup(path, plen - 2) : bson_strdup(path);
    int rc = 0;

    if (strcmp(path, "$") == 0 || (real[0] == '$') || strstr(real, ".$") != NULL)
        SBL_ERR(sbl_err_set(err, SBL_E_BadValue, "projection field %s may not start with $",
                            path));
    if (v->value_type == BSON_TYPE_DOCUMENT) {
        bson_t d;
        bson_iter_t it;
        bson_init_static(&d, v->value.v_doc.data, v->value.v_doc.data_len);
        if (!bson_iter_init(&it, &d) || !bson_iter_next(&it))
            SBL_ERR(sbl_err_set(err, E_EMPTY_SUBPROJ,
                                "An empty sub-projection is not a valid value. Found empty "
                                "object at path %s",
                                path));
        const char *op = bson_iter_key(&it);
        bson_value_t arg;
        sbl_iter_value(&it, &arg);
        if (positional)
            SBL_ERR(sbl_err_set(err, E_POSITIONAL_OBJECT, "positional projection cannot be used "
                                "with an expression or sub object"));
        if (op[0] != '$' || bson_count_keys(&d) > 1) { /* a sub-projection */
            SBL_ERR(parse_spec(c, &d, real, err));
            goto done;
        }
        if (strcmp(op, "$meta") == 0) {
            bool rid = arg.value_type == BSON_TYPE_UTF8 &&
                       strcmp(arg.value.v_utf8.str, "recordId") == 0;
            if (!rid &&
                (arg.value_type != BSON_TYPE_UTF8 || strcmp(arg.value.v_utf8.str, "textScore") != 0))
                SBL_ERR(sbl_err_set(err, SBL_E_BadValue, "Unsupported argument to $meta: %s",
                                    arg.value_type == BSON_TYPE_UTF8 ? arg.value.v_utf8.str
                                                                     : "(not a string)"));
            if (strchr(real, '.') != NULL)
                SBL_ERR(sbl_err_set(err, SBL_E_BadValue,
                                    "$meta is supported at the top level of a projection only "
                                    "by Sable (%s)", real));
            SBL_ERR(tree_add(c->p->root, real, &leaf, err));
            leaf->action = PA_META; /* any mode: it adds the score, it does not choose fields */
            leaf->meta_rid = rid;
            if (!rid)
                c->p->has_meta = true;
            goto done;
        }
        if (strcmp(op, "$slice") == 0 || strcmp(op, "$elemMatch") == 0) {
            SBL_ERR(tree_add(c->p->root, real, &leaf, err));
            if (op[1] == 's') {
                SBL_ERR(parse_slice(leaf, &arg, err));
            } else {
                SBL_ERR(parse_elem_match(leaf, real, &arg, err));
                c->any_elem = true;
            }
            goto done;
        }
        if (strcmp(op, "$literal") == 0) {
            SBL_ERR(computed_mode(c, real, true, err));
            SBL_ERR(tree_add(c->p->root, real, &leaf, err));
            leaf->action = PA_LITERAL;
            bson_value_copy(&arg, &leaf->lit);
            tree_mark(c->p->root, real, false);
            goto done;
        }
        SBL_ERR(add_computed(c, real, v, err));
        goto done;
    }
    if (v->value_type == BSON_TYPE_BOOL || v->value_type == BSON_TYPE_INT32 ||
        v->value_type == BSON_TYPE_INT64 || v->value_type == BSON_TYPE_DOUBLE ||
        v->value_type == BSON_TYPE_DECIMAL128) {
        bool on;
        int64_t x;
        if (v->value_type == BSON_TYPE_BOOL)
            on = v->value.v_bool;
        else if (v->value_type == BSON_TYPE_DECIMAL128)
            on = !(v->value.v_decimal128.low == 0 &&
                   (v->value.v_decimal128.high & 0x1ffffffffffffULL) == 0);
        else if (v->value_type == BSON_TYPE_DOUBLE)
            on = v->value.v_double != 0.0;
        else
            on = as_int64(v, &x) && x != 0;
        if (positional && !on)
            SBL_ERR(sbl_err_set(err, E_EXCL_IN_INCL,
                                "Cannot do exclusion on field %s in inclusion projection", path));
        if (strcmp(real, "_id") == 0) {
            c->p->id_excluded = !on;
            c->id_included = on;
            if (!on)
                goto done;
        } else {
            SBL_ERR(set_mode(c, on ? PA_INCLUDE : PA_EXCLUDE, real, err));
        }
        SBL_ERR(tree_add(c->p->root, real, &leaf, err));
        leaf->action = on ? (positional ? PA_POSITIONAL : PA_INCLUDE) : PA_EXCLUDE;
        if (positional) {
            if (c->any_positional)
                SBL_ERR(sbl_err_set(err, E_MULTI_POSITIONAL,
                                    "Cannot specify more than one positional projection per "
                                    "query."));
            c->any_positional = true;
            tree_mark(c->p->root, real, true);
        }
        goto done;
    }
    if (positional)
        SBL_ERR(sbl_err_set(err, E_POSITIONAL_LITERAL,
                            "positional projection cannot be used with a literal"));
    if (v->value_type == BSON_TYPE_UTF8 && v->value.v_utf8.str[0] == '$') {
        SBL_ERR(add_computed(c, real, v, err));
        goto done;
    }
    /* any other value is a literal */
    SBL_ERR(computed_mode(c, real, false, err));
    SBL_ERR(tree_add(c->p->root, real, &leaf, err));
    leaf->action = PA_LITERAL;
    bson_value_copy(v, &leaf->lit);
    tree_mark(c->p->root, real, false);
done:
err:
    bson_free(real);
    return rc;
}

static int parse_spec(pparse_t *c, const bson_t *spec, const char *prefix, sbl_err_t *err)
{
    bson_iter_t it;

    if (!bson_iter_init(&it, spec))
        return sbl_err_set(err, SBL_E_BadValue, "malformed projection");
    while (bson_iter_next(&it)) {
        bson_value_t v;
        char *path = prefix != NULL ? bson_strdup_printf("%s.%s", prefix, bson_iter_key(&it))
                                    : bson_strdup(bson_iter_key(&it));
        sbl_iter_value(&it, &v);
        int rc = parse_entry(c, path, &v, err);
        bson_free(path);
        if (rc != 0)
            return rc;
    }
    return 0;
}

sbl_projection_t *sbl_projection_new(const bson_t *spec, sbl_err_t *err)
{
    return sbl_projection_new_let(spec, NULL, err);
}

sbl_projection_t *sbl_projection_new_let(const bson_t *spec, const bson_t *let, sbl_err_t *err)
{
    sbl_projection_t *p = bson_malloc0(sizeof(*p));
    pparse_t c = {.p = p};

    if (let != NULL && !bson_empty(let))
        p->let = bson_copy(let);

    p->root = bson_malloc0(sizeof(*p->root));
    p->empty = spec == NULL || bson_empty(spec);
    if (p->empty)
        return p;
    if (parse_spec(&c, spec, NULL, err) != 0) {
        sbl_projection_free(p);
        return NULL;
    }
    if (c.mode != 0)
        p->inclusion = c.mode == PA_INCLUDE;
    else
        p->inclusion = c.any_elem || c.id_included;
    return p;
}

/* ---- applying ------------------------------------------------------------ */

typedef struct papply {
    const sbl_projection_t *p;
    const bson_t *doc;   /* the whole document ($elemMatch is top level) */
    int32_t pos;         /* positional index from the matcher */
    bool pos_used;       /* an array on the positional path was already narrowed */
    sbl_err_t *err;
} papply_t;

static int apply_level(papply_t *a, const pnode_t *n, const uint8_t *data, uint32_t len,
                       bool top, bson_t *out);

static void append_slice(const pnode_t *n, const char *key, const bson_value_t *v, bson_t *out)
{
    bson_t arr, res;
    bson_iter_t it;
    int64_t count = 0, start, stop, i = 0;

    if (v->value_type != BSON_TYPE_ARRAY) {
        sbl_append_value(out, key, -1, v);
        return;
    }
    bson_init_static(&arr, v->value.v_doc.data, v->value.v_doc.data_len);
    count = bson_count_keys(&arr);
    if (n->has_skip) {
        start = n->skip < 0 ? (count + n->skip < 0 ? 0 : count + n->skip)
                            : (n->skip > count ? count : n->skip);
        stop = count - start < n->limit ? count : start + n->limit;
    } else if (n->limit >= 0) {
        start = 0;
        stop = n->limit < count ? n->limit : count;
    } else {
        start = count + n->limit < 0 ? 0 : count + n->limit;
        stop = count;
    }
    bson_append_array_begin(out, key, -1, &res);
    if (bson_iter_init(&it, &arr)) {
        int64_t k = 0;
        while (bson_iter_next(&it)) {
            if (i >= start && i < stop) {
                char buf[16];
                const char *ks;
                bson_uint32_to_string((uint32_t)k++, &ks, buf, sizeof(buf));
                sbl_append_iter(&res, ks, -1, &it);
            }
            i++;
        }
    }
    bson_append_array_end(out, &res);
}

/* The pos-th element of an array value; false when there is none. */
static bool array_element(const bson_value_t *arrv, int32_t pos, bson_iter_t *out)
{
    bson_t arr;
    int32_t i = 0;

    if (pos < 0 ||
        !bson_init_static(&arr, arrv->value.v_doc.data, arrv->value.v_doc.data_len) ||
        !bson_iter_init(out, &arr))
        return false;
    while (bson_iter_next(out))
        if (i++ == pos)
            return true;
    return false;
}

static int positional_error(papply_t *a)
{
    return sbl_err_set(a->err, E_POSITIONAL_NO_MATCH,
                       "Executor error during find command :: caused by :: positional "
                       "operator '.$' couldn't find a matching element in the array");
}

/* Apply an interior node to the elements of an array (inclusion drops scalars). */
static int apply_array(papply_t *a, const pnode_t *n, const bson_value_t *v, bson_t *out)
{
    bson_t arr;
    bson_iter_t it;
    uint32_t k = 0;

    if (!bson_init_static(&arr, v->value.v_doc.data, v->value.v_doc.data_len) ||
        !bson_iter_init(&it, &arr))
        return 0;
    while (bson_iter_next(&it)) {
        bson_value_t e;
        char buf[16];
        const char *ks;
        sbl_iter_value(&it, &e);
        bson_uint32_to_string(k, &ks, buf, sizeof(buf));
        if (e.value_type == BSON_TYPE_DOCUMENT) {
            bson_t sub;
            bson_append_document_begin(out, ks, -1, &sub);
            int rc = apply_level(a, n, e.value.v_doc.data, e.value.v_doc.data_len, false, &sub);
            bson_append_document_end(out, &sub);
            SBL_RET(rc);
            k++;
        } else if (e.value_type == BSON_TYPE_ARRAY) {
            bson_t sub;
            bson_append_array_begin(out, ks, -1, &sub);
            int rc = apply_array(a, n, &e, &sub);
            bson_append_array_end(out, &sub);
            SBL_RET(rc);
            k++;
        } else if (!a->p->inclusion) {
            sbl_append_iter(out, ks, -1, &it);
            k++;
        }
    }
    return 0;
}

/* Apply child node n to the field at it (named key). */
static int apply_field(papply_t *a, const pnode_t *n, bson_iter_t *it, bson_t *out)
{
    const char *key = bson_iter_key(it);
    bson_value_t v;
    bson_iter_t el;
    int32_t epos = -1;

    sbl_iter_value(it, &v);
    switch (n->action) {
    case PA_INCLUDE:
        sbl_append_iter(out, key, -1, it);
        return 0;
    case PA_EXCLUDE:
    case PA_LITERAL:
    case PA_EXPR:
    case PA_META:
        return 0; /* literals and scores are appended after the document's fields */
    case PA_SLICE:
        append_slice(n, key, &v, out);
        return 0;
    case PA_ELEM:
        if (v.value_type == BSON_TYPE_ARRAY && sbl_matcher_match(n->em, a->doc, &epos) &&
            array_element(&v, epos, &el)) {
            bson_t res;
            bson_append_array_begin(out, key, -1, &res);
            sbl_append_iter(&res, "0", 1, &el);
            bson_append_array_end(out, &res);
        }
        return 0;
    case PA_POSITIONAL:
        if (v.value_type != BSON_TYPE_ARRAY || a->pos_used) {
            sbl_append_iter(out, key, -1, it);
            return 0;
        }
        if (!array_element(&v, a->pos, &el))
            return positional_error(a);
        {
            bson_t res;
            bson_append_array_begin(out, key, -1, &res);
            sbl_append_iter(&res, "0", 1, &el);
            bson_append_array_end(out, &res);
        }
        return 0;
    default:
        break;
    }
    /* interior part */
    if (v.value_type == BSON_TYPE_DOCUMENT) {
        bson_t sub;
        bson_append_document_begin(out, key, -1, &sub);
        int rc = apply_level(a, n, v.value.v_doc.data, v.value.v_doc.data_len, false, &sub);
        bson_append_document_end(out, &sub);
        return rc;
    }
    if (v.value_type == BSON_TYPE_ARRAY) {
        bson_t sub;
        int rc;
        bson_append_array_begin(out, key, -1, &sub);
        if (n->has_positional && a->p->inclusion && !a->pos_used) {
            /* the first array on the positional path keeps only the matched element */
            if (!array_element(&v, a->pos, &el)) {
                rc = positional_error(a);
            } else {
                bson_value_t e;
                sbl_iter_value(&el, &e);
                a->pos_used = true;
                rc = 0;
                if (e.value_type == BSON_TYPE_DOCUMENT) {
                    bson_t d;
                    bson_append_document_begin(&sub, "0", 1, &d);
                    rc = apply_level(a, n, e.value.v_doc.data, e.value.v_doc.data_len, false,
                                     &d);
                    bson_append_document_end(&sub, &d);
                }
                a->pos_used = false;
            }
        } else {
            rc = apply_array(a, n, &v, &sub);
        }
        bson_append_array_end(out, &sub);
        return rc;
    }
    if (!a->p->inclusion)
        sbl_append_iter(out, key, -1, it);
    return 0;
}

/* Append literal or computed field k (a computed one that is missing is left out). */
static int append_computed(papply_t *a, const pnode_t *k, bson_t *out)
{
    if (k->action == PA_LITERAL) {
        sbl_append_value(out, k->name, -1, &k->lit);
        return 0;
    }
    bson_value_t v;
    SBL_RET(proj_ext->eval(k->expr, a->doc, a->p->let, &v, a->err));
    if (v.value_type != BSON_TYPE_EOD)
        sbl_append_value(out, k->name, -1, &v);
    bson_value_destroy(&v);
    return 0;
}

/* Append the literal and computed fields under n that the document did not have at this level. */
static int append_literals(papply_t *a, const pnode_t *n, bson_t *out)
{
    int rc = 0;
    for (size_t i = 0; i < n->nkids && rc == 0; i++) {
        const pnode_t *k = n->kids[i];
        if (k->action == PA_LITERAL || k->action == PA_EXPR) {
            rc = append_computed(a, k, out);
        } else if (k->action == PA_NONE && k->has_literal) {
            bson_t sub;
            bson_append_document_begin(out, k->name, -1, &sub);
            rc = append_literals(a, k, &sub);
            bson_append_document_end(out, &sub);
        }
    }
    return rc;
}

static int apply_level(papply_t *a, const pnode_t *n, const uint8_t *data, uint32_t len,
                       bool top, bson_t *out)
{
    bson_t d;
    bson_iter_t it;
    const pnode_t *seen_literal_parents[64];
    size_t nseen = 0;

    if (!bson_init_static(&d, data, len) || !bson_iter_init(&it, &d))
        return 0;
    while (bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        const pnode_t *k = pnode_child(n, key);
        if (top && strcmp(key, "_id") == 0 && a->p->id_excluded)
            continue;
        if (top && strcmp(key, SBL_TEXT_SCORE_FIELD) == 0)
            continue; /* the executor's: only $meta shows it */
        if (k == NULL) {
            if (!a->p->inclusion || (top && strcmp(key, "_id") == 0))
                sbl_append_iter(out, key, -1, &it);
            continue;
        }
        if (k->action == PA_NONE && k->has_literal &&
            (BSON_ITER_HOLDS_DOCUMENT(&it) || BSON_ITER_HOLDS_ARRAY(&it))) {
            /* existing sub-document gets its literals inside; remember it */
            if (nseen < sizeof(seen_literal_parents) / sizeof(seen_literal_parents[0]))
                seen_literal_parents[nseen++] = k;
        }
        SBL_RET(apply_field(a, k, &it, out));
    }
    /* literals at this level, and literal sub-documents the document lacked */
    for (size_t i = 0; i < n->nkids; i++) {
        const pnode_t *k = n->kids[i];
        bool seen = false;
        for (size_t s = 0; s < nseen && !seen; s++)
            seen = seen_literal_parents[s] == k;
        if (k->action == PA_LITERAL || k->action == PA_EXPR) {
            SBL_RET(append_computed(a, k, out));
        } else if (k->action == PA_META && top && k->meta_rid) {
            int64_t rid = sbl_doc_record_id(&d);
            if (rid != 0)
                bson_append_int64(out, k->name, -1, rid);
        } else if (k->action == PA_META && top) {
            bson_iter_t si;
            if (bson_iter_init_find(&si, &d, SBL_TEXT_SCORE_FIELD))
                sbl_append_iter(out, k->name, -1, &si);
        } else if (k->action == PA_NONE && k->has_literal && !seen) {
            bson_t sub;
            bson_append_document_begin(out, k->name, -1, &sub);
            int rc = append_literals(a, k, &sub);
            bson_append_document_end(out, &sub);
            SBL_RET(rc);
        }
    }
    return 0;
}

void sbl_projection_strip_meta(const bson_t *doc, bson_t *out)
{
    bson_iter_t it;
    if (!bson_iter_init(&it, doc))
        return;
    while (bson_iter_next(&it))
        if (strcmp(bson_iter_key(&it), SBL_TEXT_SCORE_FIELD) != 0)
            sbl_append_iter(out, bson_iter_key(&it), -1, &it);
}

bool sbl_projection_has_meta(const sbl_projection_t *p)
{
    return p != NULL && p->has_meta;
}

int sbl_projection_apply(const sbl_projection_t *p, const bson_t *doc, int32_t array_pos,
                         bson_t *out, sbl_err_t *err)
{
    papply_t a = {.p = p, .doc = doc, .pos = array_pos, .err = err};

    if (p->empty) {
        bson_concat(out, doc);
        return 0;
    }
    return apply_level(&a, p->root, bson_get_data(doc), doc->len, true, out);
}
