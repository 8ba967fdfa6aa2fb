/*
 * upd_parse.c: turn an update specification into its parsed form: either a
 * replacement document or a list of (operator, path, operand) actions, plus
 * the parsed arrayFilters.  Everything MongoDB rejects before touching a
 * document is rejected here, with MongoDB's codes and messages.
 *
 * What must stay true: no two action paths conflict (one equal to or a
 * prefix of another); every $[<id>] has exactly one array filter and every
 * array filter is used; actions end up sorted by path (see upd_int.h).
 */
#include "doc/doc.h"
#include "update/upd_int.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

void upd_comps_free(char **comps, size_t n)
{
    for (size_t i = 0; i < n; i++)
        bson_free(comps[i]);
    bson_free(comps);
}

int upd_split_path(const char *path, char ***compsp, size_t *np, sbl_err_t *err)
{
    size_t n = 1, i = 0;
    const char *p, *dot;
    char **comps;

    *compsp = NULL;
    *np = 0;
    if (path[0] == '\0')
        return sbl_err_set(err, SBL_E_EmptyFieldName, "An empty update path is not valid.");
    for (p = path; *p; p++)
        n += *p == '.';
    comps = bson_malloc0(n * sizeof(*comps));
    for (p = path;; p = dot + 1) {
        dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (len == 0) {
            upd_comps_free(comps, i);
            return sbl_err_set(err, SBL_E_EmptyFieldName,
                               "The update path '%s' contains an empty field name, which is not "
                               "allowed.",
                               path);
        }
        comps[i++] = bson_strndup(p, len);
        if (dot == NULL)
            break;
    }
    *compsp = comps;
    *np = n;
    return 0;
}

bool upd_array_update(const char *comp, const char **idp, size_t *lenp)
{
    size_t len = strlen(comp);
    if (len < 3 || comp[0] != '$' || comp[1] != '[' || comp[len - 1] != ']')
        return false;
    *idp = comp + 2;
    *lenp = len - 3;
    return true;
}

/* Check the components of an update path: positional forms, $-prefixed names. */
static int check_path(const upd_action_t *a, char **comps, size_t n, const char *path,
                      int *positionalp, sbl_err_t *err)
{
    const char *id;
    size_t idlen;
    *positionalp = -1;
    for (size_t i = 0; i < n; i++) {
        const char *c = comps[i];
        if (strcmp(c, "$") == 0) {
            if (i == 0)
                return sbl_err_set(err, SBL_E_BadValue,
                                   "Cannot have positional (i.e. '$') element in the first "
                                   "component in path '%s'",
                                   path);
            if (*positionalp >= 0)
                return sbl_err_set(err, SBL_E_BadValue,
                                   "Too many positional (i.e. '$') elements found in path '%s'",
                                   path);
            *positionalp = (int)i;
        } else if (upd_array_update(c, &id, &idlen)) {
            if (i == 0)
                return sbl_err_set(err, SBL_E_BadValue,
                                   "Cannot have array filter identifier (i.e. '$[<id>]') element "
                                   "in the first component in path '%s'",
                                   path);
        } else if (c[0] == '$') {
            return sbl_err_set(err, SBL_E_DollarPrefixedFieldName,
                               "The dollar ($) prefixed field '%s' in '%s' is not allowed in the "
                               "context of an update's replacement document. Consider using an "
                               "aggregation pipeline with $replaceWith.",
                               c, path);
        }
    }
    return 0;
}

static void action_destroy(upd_action_t *a)
{
    bson_free(a->path);
    upd_comps_free(a->comps, a->ncomps);
    bson_value_destroy(&a->arg);
    for (size_t i = 0; i < a->neach; i++)
        bson_value_destroy(&a->each[i]);
    bson_free(a->each);
    if (a->sort)
        sbl_sort_free(a->sort);
    if (a->matcher)
        sbl_matcher_free(a->matcher);
    bson_free(a->bits);
    bson_free(a->to);
    upd_comps_free(a->to_comps, a->to_ncomps);
}

void sbl_update_free(sbl_update_t *u)
{
    if (u == NULL)
        return;
    for (size_t i = 0; i < u->nacts; i++)
        action_destroy(&u->acts[i]);
    bson_free(u->acts);
    for (size_t i = 0; i < u->nfilters; i++) {
        bson_free(u->filters[i].id);
        if (u->filters[i].m)
            sbl_matcher_free(u->filters[i].m);
    }
    bson_free(u->filters);
    if (u->repl)
        bson_destroy(u->repl);
    bson_free(u);
}

void sbl_update_set_collation(sbl_update_t *u, const sbl_collation_t *coll)
{
    u->coll = coll;
    for (size_t i = 0; i < u->nfilters; i++)
        if (u->filters[i].m)
            sbl_matcher_set_collation(u->filters[i].m, coll);
    for (size_t i = 0; i < u->nacts; i++) {
        if (u->acts[i].matcher)
            sbl_matcher_set_collation(u->acts[i].matcher, coll);
        if (u->acts[i].sort)
            sbl_sort_set_collation(u->acts[i].sort, coll);
    }
}

bool sbl_update_is_replacement(const sbl_update_t *u)
{
    return u->replacement;
}

static int comps_cmp(char **a, size_t na, char **b, size_t nb)
{
    for (size_t i = 0; i < na && i < nb; i++) {
        int c = strcmp(a[i], b[i]);
        if (c != 0)
            return c;
    }
    return na < nb ? -1 : na > nb ? 1 : 0;
}

/* The path an action is applied at: $rename sits at its destination, as in MongoDB. */
static void action_key(const upd_action_t *a, char ***compsp, size_t *np)
{
    if (a->to_comps) {
        *compsp = a->to_comps;
        *np = a->to_ncomps;
    } else {
        *compsp = a->comps;
        *np = a->ncomps;
    }
}

static int action_cmp(const void *x, const void *y)
{
    const upd_action_t *a = x, *b = y;
    char **ca, **cb;
    size_t na, nb;
    action_key(a, &ca, &na);
    action_key(b, &cb, &nb);
    return comps_cmp(ca, na, cb, nb);
}

/* One path of the update, for conflict detection. */
typedef struct path_ref {
    char **comps;
    size_t n;
    size_t seq; /* order of appearance in the update */
    const char *text;
} path_ref_t;

static int path_ref_cmp(const void *x, const void *y)
{
    const path_ref_t *a = x, *b = y;
    int c = comps_cmp(a->comps, a->n, b->comps, b->n);
    if (c != 0)
        return c;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static bool comps_prefix(const path_ref_t *a, const path_ref_t *b)
{
    if (a->n > b->n)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->comps[i], b->comps[i]) != 0)
            return false;
    return true;
}

/* ConflictingUpdateOperators when one path equals or prefixes another. */
static int check_conflicts(const sbl_update_t *u, sbl_err_t *err)
{
    size_t n = 0;
    path_ref_t *refs = bson_malloc0(2 * u->nacts * sizeof(*refs) + 1);
    int rc = 0;

    for (size_t i = 0; i < u->nacts; i++) {
        const upd_action_t *a = &u->acts[i];
        refs[n++] = (path_ref_t){a->comps, a->ncomps, 2 * i, a->path};
        if (a->to_comps)
            refs[n++] = (path_ref_t){a->to_comps, a->to_ncomps, 2 * i + 1, a->to};
    }
    if (n > 1)
        qsort(refs, n, sizeof(*refs), path_ref_cmp);
    for (size_t i = 1; i < n; i++) {
        const path_ref_t *shorter = &refs[i - 1], *longer = &refs[i];
        if (!comps_prefix(shorter, longer))
            continue;
        const path_ref_t *later = shorter->seq > longer->seq ? shorter : longer;
        rc = sbl_err_set(err, SBL_E_ConflictingUpdateOperators,
                         "Updating the path '%s' would create a conflict at '%s'", later->text,
                         shorter->text);
        break;
    }
    bson_free(refs);
    return rc;
}

/* ---- arrayFilters ---------------------------------------------------------- */

/* Collect the one top-level field name of a filter, through $and/$or/$nor. */
static int filter_name(const bson_t *filter, char **namep, sbl_err_t *err)
{
    bson_iter_t it, sub;
    int rc = 0;

    if (!bson_iter_init(&it, filter))
        return sbl_err_set(err, SBL_E_FailedToParse, "Error parsing array filter");
    while (rc == 0 && bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (k[0] == '$') {
            if (strcmp(k, "$and") && strcmp(k, "$or") && strcmp(k, "$nor"))
                continue;
            if (!BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &sub))
                continue;
            while (rc == 0 && bson_iter_next(&sub)) {
                bson_t clause;
                const uint8_t *data;
                uint32_t len;
                if (!BSON_ITER_HOLDS_DOCUMENT(&sub))
                    continue;
                bson_iter_document(&sub, &len, &data);
                if (bson_init_static(&clause, data, len))
                    rc = filter_name(&clause, namep, err);
            }
            continue;
        }
        const char *dot = strchr(k, '.');
        size_t len = dot ? (size_t)(dot - k) : strlen(k);
        if (*namep == NULL) {
            *namep = bson_strndup(k, len);
        } else if (strlen(*namep) != len || strncmp(*namep, k, len) != 0) {
            rc = sbl_err_set(err, SBL_E_FailedToParse,
                             "Error parsing array filter :: caused by :: Expected a single "
                             "top-level field name, found '%s' and '%.*s'",
                             *namep, (int)len, k);
        }
    }
    return rc;
}

static bool valid_identifier(const char *s)
{
    if (!islower((unsigned char)s[0]))
        return false;
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p))
            return false;
    return true;
}

static int parse_filters(sbl_update_t *u, const bson_t *array_filters, sbl_err_t *err)
{
    bson_iter_t it;
    uint32_t count = array_filters ? bson_count_keys(array_filters) : 0;

    if (count == 0)
        return 0;
    if (u->replacement)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "arrayFilters may not be specified for replacement-style updates");
    u->filters = bson_malloc0(count * sizeof(*u->filters));
    bson_iter_init(&it, array_filters);
    while (bson_iter_next(&it)) {
        bson_t filter;
        const uint8_t *data;
        uint32_t len;
        char *name = NULL;

        if (!BSON_ITER_HOLDS_DOCUMENT(&it))
            return sbl_err_set(err, SBL_E_TypeMismatch,
                               "Each array filter must be an object, found %s",
                               sbl_type_name(bson_iter_type(&it)));
        bson_iter_document(&it, &len, &data);
        if (!bson_init_static(&filter, data, len))
            return sbl_err_set(err, SBL_E_InvalidBSON, "invalid array filter");
        int rc = filter_name(&filter, &name, err);
        if (rc != 0) {
            bson_free(name);
            return rc;
        }
        if (name == NULL)
            return sbl_err_set(err, SBL_E_FailedToParse,
                               "Cannot use an expression without a top-level field name in "
                               "arrayFilters");
        upd_filter_t *f = &u->filters[u->nfilters++];
        f->id = name;
        if (!valid_identifier(name))
            return sbl_err_set(err, SBL_E_BadValue,
                               "Error parsing array filter :: caused by :: The top-level field "
                               "name must be an alphanumeric string beginning with a lowercase "
                               "letter, found '%s'",
                               name);
        for (size_t i = 0; i + 1 < u->nfilters; i++)
            if (strcmp(u->filters[i].id, name) == 0)
                return sbl_err_set(err, SBL_E_FailedToParse,
                                   "Found multiple array filters with the same top-level field "
                                   "name %s",
                                   name);
        f->m = sbl_matcher_new(&filter, err);
        if (f->m == NULL)
            return err && err->code ? err->code : SBL_E_BadValue;
    }
    return 0;
}

/* Every $[<id>] must name a filter and every filter must be named. */
static int check_identifiers(const sbl_update_t *u, const bson_t *spec, sbl_err_t *err)
{
    bool *used = bson_malloc0(u->nfilters + 1);
    int rc = 0;

    for (size_t i = 0; rc == 0 && i < u->nacts; i++) {
        const upd_action_t *a = &u->acts[i];
        for (size_t j = 0; rc == 0 && j < a->ncomps; j++) {
            size_t len, f;
            const char *id;
            if (!upd_array_update(a->comps[j], &id, &len) || len == 0)
                continue;
            for (f = 0; f < u->nfilters; f++)
                if (strlen(u->filters[f].id) == len && strncmp(u->filters[f].id, id, len) == 0)
                    break;
            if (f == u->nfilters)
                rc = sbl_err_set(err, SBL_E_BadValue,
                                 "No array filter found for identifier '%.*s' in path '%s'",
                                 (int)len, id, a->path);
            else
                used[f] = true;
        }
    }
    for (size_t f = 0; rc == 0 && f < u->nfilters; f++) {
        if (used[f])
            continue;
        bson_string_t *s = bson_string_new(NULL);
        bson_value_t v = {.value_type = BSON_TYPE_DOCUMENT};
        v.value.v_doc.data = (uint8_t *)bson_get_data(spec);
        v.value.v_doc.data_len = spec->len;
        upd_render_value(s, &v);
        rc = sbl_err_set(err, SBL_E_FailedToParse,
                         "The array filter for identifier '%s' was not used in the update %s",
                         u->filters[f].id, s->str);
        bson_string_free(s, true);
    }
    bson_free(used);
    return rc;
}

/* ---- the update document ---------------------------------------------------- */

static int parse_replacement(sbl_update_t *u, const bson_t *spec, sbl_err_t *err)
{
    bson_iter_t it;

    u->replacement = true;
    u->repl = bson_copy(spec);
    bson_iter_init(&it, spec);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (k[0] == '$')
            return sbl_err_set(err, SBL_E_DollarPrefixedFieldName,
                               "The dollar ($) prefixed field '%s' in '%s' is not allowed in the "
                               "context of an update's replacement document. Consider using an "
                               "aggregation pipeline with $replaceWith.",
                               k, k);
    }
    return 0;
}

static int parse_operator(sbl_update_t *u, bson_iter_t *opit, size_t *capp, sbl_err_t *err)
{
    const char *name = bson_iter_key(opit);
    const upd_op_t *op = upd_op_find(name);
    bson_iter_t it;

    if (op == NULL)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "Unknown modifier: %s. Expected a valid update modifier or "
                           "pipeline-style update specified as an array",
                           name);
    if (!BSON_ITER_HOLDS_DOCUMENT(opit)) {
        bson_string_t *s = bson_string_new(NULL);
        upd_render_value(s, bson_iter_value(opit));
        sbl_err_set(err, SBL_E_FailedToParse,
                    "Modifiers operate on fields but we found type %s instead. For example: "
                    "{$mod: {<field>: ...}} not {%s: %s}",
                    sbl_type_name(bson_iter_type(opit)), name, s->str);
        bson_string_free(s, true);
        return SBL_E_FailedToParse;
    }
    bson_iter_recurse(opit, &it);
    if (!bson_iter_next(&it))
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "'%s' is empty. You must specify a field like so: {%s: {<field_name>: "
                           "...}}",
                           name, name);
    do {
        if (u->nacts == *capp) {
            *capp = *capp ? *capp * 2 : 8;
            u->acts = bson_realloc(u->acts, *capp * sizeof(*u->acts));
        }
        upd_action_t *a = &u->acts[u->nacts++];
        memset(a, 0, sizeof(*a));
        a->op = op;
        a->path = bson_strdup(bson_iter_key(&it));
        bson_value_copy(bson_iter_value(&it), &a->arg);
        SBL_RET(upd_split_path(a->path, &a->comps, &a->ncomps, err));
        SBL_RET(check_path(a, a->comps, a->ncomps, a->path, &a->positional, err));
        SBL_RET(op->parse(a, &it, err));
    } while (bson_iter_next(&it));
    return 0;
}

sbl_update_t *sbl_update_new(const bson_t *spec, const bson_t *array_filters, sbl_err_t *err)
{
    sbl_update_t *u = bson_malloc0(sizeof(*u));
    sbl_err_t local;
    bson_iter_t it;
    size_t cap = 0;
    int rc = 0;

    if (err == NULL)
        err = &local;
    sbl_err_clear(err);

    if (!bson_iter_init(&it, spec)) {
        rc = sbl_err_set(err, SBL_E_InvalidBSON, "invalid update document");
        goto err;
    }
    if (!bson_iter_next(&it) || bson_iter_key(&it)[0] != '$') {
        SBL_ERR(parse_replacement(u, spec, err));
        SBL_ERR(parse_filters(u, array_filters, err));
        return u;
    }
    do {
        SBL_ERR(parse_operator(u, &it, &cap, err));
    } while (bson_iter_next(&it));
    SBL_ERR(check_conflicts(u, err));
    SBL_ERR(parse_filters(u, array_filters, err));
    SBL_ERR(check_identifiers(u, spec, err));
    if (u->nacts > 1) /* glibc's qsort costs ~120 instructions even for one */
        qsort(u->acts, u->nacts, sizeof(*u->acts), action_cmp);
    return u;
err:
    (void)rc;
    sbl_update_free(u);
    return NULL;
}
