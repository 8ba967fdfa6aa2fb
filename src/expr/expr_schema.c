/*
 * expr_schema.c: $jsonSchema (MongoDB's draft-4 subset: bsonType, type,
 * required, properties, additionalProperties, patternProperties, minimum,
 * maximum, exclusive bounds, multipleOf, enum, pattern, minLength,
 * maxLength, items, minItems, maxItems, uniqueItems, minProperties,
 * maxProperties, allOf, anyOf, oneOf, not), and the registration of $expr
 * and $jsonSchema with the query module's matcher.
 *
 * What must stay true: a keyword only constrains values of the type it is
 * about (minLength ignores numbers, properties ignores arrays ...), as in
 * JSON Schema; a parsed schema is immutable.
 */
#include "expr/expr_int.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <math.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "doc/doc.h"
#include "query/query.h"

struct sbl_schema {
    uint32_t types; /* bit per bson type; 0: any */
    char **required;
    size_t nreq;
    char **pnames;
    sbl_schema_t **props;
    size_t nprops;
    int addl; /* -1 absent, 0 false, 1 schema */
    sbl_schema_t *addl_schema;
    pcre2_code **pp_re;
    sbl_schema_t **pp;
    size_t npp;
    bool has_min, has_max, excl_min, excl_max, unique;
    double min, max, multiple;
    bson_value_t *enums;
    size_t nenum;
    pcre2_code *pattern;
    int64_t min_len, max_len, min_items, max_items, min_props, max_props;
    sbl_schema_t *items;
    sbl_schema_t **items_arr;
    size_t nitems_arr;
    int addl_items; /* -1 absent, 0 false, 1 true */
    sbl_schema_t **all_of, **any_of, **one_of, *not_;
    size_t nall, nany, none;
};

#define TYPE_BIT(t) (1u << ((unsigned)(t) & 31))
#define NUMBER_BITS                                                                                \
    (TYPE_BIT(BSON_TYPE_INT32) | TYPE_BIT(BSON_TYPE_INT64) | TYPE_BIT(BSON_TYPE_DOUBLE) |          \
     TYPE_BIT(BSON_TYPE_DECIMAL128))

static uint32_t bson_type_bits(const char *name)
{
    static const struct {
        const char *n;
        uint32_t bits;
    } t[] = {{"double", TYPE_BIT(BSON_TYPE_DOUBLE)},   {"string", TYPE_BIT(BSON_TYPE_UTF8)},
             {"object", TYPE_BIT(BSON_TYPE_DOCUMENT)}, {"array", TYPE_BIT(BSON_TYPE_ARRAY)},
             {"binData", TYPE_BIT(BSON_TYPE_BINARY)},  {"undefined", TYPE_BIT(BSON_TYPE_UNDEFINED)},
             {"objectId", TYPE_BIT(BSON_TYPE_OID)},    {"bool", TYPE_BIT(BSON_TYPE_BOOL)},
             {"date", TYPE_BIT(BSON_TYPE_DATE_TIME)},  {"null", TYPE_BIT(BSON_TYPE_NULL)},
             {"regex", TYPE_BIT(BSON_TYPE_REGEX)},     {"javascript", TYPE_BIT(BSON_TYPE_CODE)},
             {"int", TYPE_BIT(BSON_TYPE_INT32)},       {"timestamp", TYPE_BIT(BSON_TYPE_TIMESTAMP)},
             {"long", TYPE_BIT(BSON_TYPE_INT64)},      {"decimal", TYPE_BIT(BSON_TYPE_DECIMAL128)},
             {"number", NUMBER_BITS},                  {"minKey", 1u << 30},
             {"maxKey", 1u << 31}};
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        if (strcmp(t[i].n, name) == 0)
            return t[i].bits;
    return 0;
}

static uint32_t json_type_bits(const char *name)
{
    if (strcmp(name, "object") == 0) return TYPE_BIT(BSON_TYPE_DOCUMENT);
    if (strcmp(name, "array") == 0) return TYPE_BIT(BSON_TYPE_ARRAY);
    if (strcmp(name, "number") == 0) return NUMBER_BITS;
    if (strcmp(name, "boolean") == 0) return TYPE_BIT(BSON_TYPE_BOOL);
    if (strcmp(name, "string") == 0) return TYPE_BIT(BSON_TYPE_UTF8);
    if (strcmp(name, "null") == 0) return TYPE_BIT(BSON_TYPE_NULL);
    return 0;
}

static uint32_t value_bit(const bson_value_t *v)
{
    if (v->value_type == BSON_TYPE_MINKEY)
        return 1u << 30;
    if (v->value_type == BSON_TYPE_MAXKEY)
        return 1u << 31;
    return TYPE_BIT(v->value_type);
}

void sbl_schema_free(sbl_schema_t *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->nreq; i++)
        bson_free(s->required[i]);
    bson_free(s->required);
    for (size_t i = 0; i < s->nprops; i++) {
        bson_free(s->pnames[i]);
        sbl_schema_free(s->props[i]);
    }
    bson_free(s->pnames);
    bson_free(s->props);
    for (size_t i = 0; i < s->npp; i++) {
        pcre2_code_free(s->pp_re[i]);
        sbl_schema_free(s->pp[i]);
    }
    bson_free(s->pp_re);
    bson_free(s->pp);
    sbl_schema_free(s->addl_schema);
    for (size_t i = 0; i < s->nenum; i++)
        bson_value_destroy(&s->enums[i]);
    bson_free(s->enums);
    if (s->pattern)
        pcre2_code_free(s->pattern);
    sbl_schema_free(s->items);
    for (size_t i = 0; i < s->nitems_arr; i++)
        sbl_schema_free(s->items_arr[i]);
    bson_free(s->items_arr);
    for (size_t i = 0; i < s->nall; i++)
        sbl_schema_free(s->all_of[i]);
    for (size_t i = 0; i < s->nany; i++)
        sbl_schema_free(s->any_of[i]);
    for (size_t i = 0; i < s->none; i++)
        sbl_schema_free(s->one_of[i]);
    bson_free(s->all_of);
    bson_free(s->any_of);
    bson_free(s->one_of);
    sbl_schema_free(s->not_);
    bson_free(s);
}

static int parse_node(const bson_t *d, sbl_schema_t **sp, int depth, sbl_err_t *err);

static pcre2_code *compile_re(const char *p, sbl_err_t *err)
{
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)p, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
    if (re == NULL)
        sbl_err_set(err, 51091, "Regular expression is invalid: %s", p);
    return re;
}

/* Parse an array of schemas (allOf/anyOf/oneOf/items). */
static int parse_list(const bson_iter_t *it, const char *kw, sbl_schema_t ***outp, size_t *np,
                      int depth, sbl_err_t *err)
{
    bson_iter_t a;
    if (!BSON_ITER_HOLDS_ARRAY(it))
        return sbl_err_set(err, SBL_E_TypeMismatch, "$jsonSchema keyword '%s' must be an array",
                           kw);
    bson_iter_recurse(it, &a);
    while (bson_iter_next(&a)) {
        bson_t sub;
        uint32_t len;
        const uint8_t *data;
        if (!BSON_ITER_HOLDS_DOCUMENT(&a))
            return sbl_err_set(err, SBL_E_TypeMismatch,
                               "$jsonSchema keyword '%s' must be an array of objects", kw);
        bson_iter_document(&a, &len, &data);
        bson_init_static(&sub, data, len);
        *outp = bson_realloc(*outp, (*np + 1) * sizeof(**outp));
        (*outp)[*np] = NULL;
        (*np)++;
        SBL_RET(parse_node(&sub, &(*outp)[*np - 1], depth + 1, err));
    }
    return 0;
}

static int sub_doc(const bson_iter_t *it, bson_t *out)
{
    uint32_t len;
    const uint8_t *data;
    bson_iter_document(it, &len, &data);
    return bson_init_static(out, data, len);
}

static int parse_kw(sbl_schema_t *s, bson_iter_t *it, int depth, sbl_err_t *err)
{
    const char *k = bson_iter_key(it);
    bson_value_t v;
    sbl_iter_value(it, &v);
    if (strcmp(k, "bsonType") == 0 || strcmp(k, "type") == 0) {
        bool bson = k[0] == 'b';
        if (BSON_ITER_HOLDS_UTF8(it)) {
            uint32_t b = bson ? bson_type_bits(v.value.v_utf8.str)
                              : json_type_bits(v.value.v_utf8.str);
            if (b == 0)
                return sbl_err_set(err, SBL_E_BadValue, "Unknown type name alias: %s",
                                   v.value.v_utf8.str);
            s->types |= b;
            return 0;
        }
        if (BSON_ITER_HOLDS_ARRAY(it)) {
            bson_iter_t a;
            bson_iter_recurse(it, &a);
            while (bson_iter_next(&a)) {
                uint32_t b = BSON_ITER_HOLDS_UTF8(&a)
                                 ? (bson ? bson_type_bits(bson_iter_utf8(&a, NULL))
                                         : json_type_bits(bson_iter_utf8(&a, NULL)))
                                 : 0;
                if (b == 0)
                    return sbl_err_set(err, SBL_E_BadValue, "Unknown type name alias in %s", k);
                s->types |= b;
            }
            return 0;
        }
        return sbl_err_set(err, SBL_E_TypeMismatch, "$jsonSchema keyword '%s' must be either a "
                                                    "string or an array of strings",
                           k);
    }
    if (strcmp(k, "required") == 0) {
        bson_iter_t a;
        if (!BSON_ITER_HOLDS_ARRAY(it))
            return sbl_err_set(err, SBL_E_TypeMismatch,
                               "$jsonSchema keyword 'required' must be an array");
        bson_iter_recurse(it, &a);
        while (bson_iter_next(&a)) {
            if (!BSON_ITER_HOLDS_UTF8(&a))
                return sbl_err_set(err, SBL_E_TypeMismatch, "$jsonSchema keyword 'required' "
                                                            "must be an array of strings");
            s->required = bson_realloc(s->required, (s->nreq + 1) * sizeof(char *));
            s->required[s->nreq++] = bson_strdup(bson_iter_utf8(&a, NULL));
        }
        if (s->nreq == 0)
            return sbl_err_set(err, SBL_E_BadValue,
                               "$jsonSchema keyword 'required' cannot be an empty array");
        return 0;
    }
    if (strcmp(k, "properties") == 0 || strcmp(k, "patternProperties") == 0) {
        bson_t d;
        bson_iter_t p;
        bool pat = k[0] == 'p' && k[1] == 'a';
        if (!BSON_ITER_HOLDS_DOCUMENT(it) || !sub_doc(it, &d))
            return sbl_err_set(err, SBL_E_TypeMismatch, "$jsonSchema keyword '%s' must be an "
                                                        "object",
                               k);
        bson_iter_init(&p, &d);
        while (bson_iter_next(&p)) {
            bson_t sd;
            if (!BSON_ITER_HOLDS_DOCUMENT(&p) || !sub_doc(&p, &sd))
                return sbl_err_set(err, SBL_E_TypeMismatch, "Nested schema for $jsonSchema "
                                                            "property '%s' must be an object",
                                   bson_iter_key(&p));
            sbl_schema_t *sub = NULL;
            int rc = parse_node(&sd, &sub, depth + 1, err);
            if (rc != 0) {
                sbl_schema_free(sub);
                return rc;
            }
            if (pat) {
                pcre2_code *re = compile_re(bson_iter_key(&p), err);
                if (re == NULL) {
                    sbl_schema_free(sub);
                    return err->code;
                }
                s->pp_re = bson_realloc(s->pp_re, (s->npp + 1) * sizeof(*s->pp_re));
                s->pp = bson_realloc(s->pp, (s->npp + 1) * sizeof(*s->pp));
                s->pp_re[s->npp] = re;
                s->pp[s->npp++] = sub;
            } else {
                s->pnames = bson_realloc(s->pnames, (s->nprops + 1) * sizeof(char *));
                s->props = bson_realloc(s->props, (s->nprops + 1) * sizeof(*s->props));
                s->pnames[s->nprops] = bson_strdup(bson_iter_key(&p));
                s->props[s->nprops++] = sub;
            }
        }
        return 0;
    }
    if (strcmp(k, "additionalProperties") == 0 || strcmp(k, "additionalItems") == 0) {
        bool items = k[10] == 'I';
        if (BSON_ITER_HOLDS_BOOL(it)) {
            if (items)
                s->addl_items = bson_iter_bool(it);
            else
                s->addl = bson_iter_bool(it) ? -1 : 0;
            return 0;
        }
        if (BSON_ITER_HOLDS_DOCUMENT(it) && !items) {
            bson_t d;
            sub_doc(it, &d);
            s->addl = 1;
            return parse_node(&d, &s->addl_schema, depth + 1, err);
        }
        if (BSON_ITER_HOLDS_DOCUMENT(it))
            return 0;
        return sbl_err_set(err, SBL_E_TypeMismatch, "$jsonSchema keyword '%s' must be either "
                                                    "an object or a boolean",
                           k);
    }
    if (strcmp(k, "minimum") == 0 || strcmp(k, "maximum") == 0 ||
        strcmp(k, "multipleOf") == 0) {
        if (!v_is_num(&v))
            return sbl_err_set(err, SBL_E_TypeMismatch, "$jsonSchema keyword '%s' must be a "
                                                        "number",
                               k);
        double x = v_to_double(&v);
        if (k[1] == 'i') {
            s->has_min = true;
            s->min = x;
        } else if (k[1] == 'a') {
            s->has_max = true;
            s->max = x;
        } else {
            if (x <= 0)
                return sbl_err_set(err, SBL_E_FailedToParse, "$jsonSchema keyword 'multipleOf' "
                                                             "must have a positive value");
            s->multiple = x;
        }
        return 0;
    }
    if (strcmp(k, "exclusiveMinimum") == 0 || strcmp(k, "exclusiveMaximum") == 0) {
        if (!BSON_ITER_HOLDS_BOOL(it))
            return sbl_err_set(err, SBL_E_TypeMismatch, "$jsonSchema keyword '%s' must be a "
                                                        "boolean",
                               k);
        *(k[10] == 'i' ? &s->excl_min : &s->excl_max) = bson_iter_bool(it);
        return 0;
    }
    if (strcmp(k, "minLength") == 0 || strcmp(k, "maxLength") == 0 ||
        strcmp(k, "minItems") == 0 || strcmp(k, "maxItems") == 0 ||
        strcmp(k, "minProperties") == 0 || strcmp(k, "maxProperties") == 0) {
        int64_t x;
        if (!v_to_i64(&v, &x) || x < 0)
            return sbl_err_set(err, SBL_E_FailedToParse, "$jsonSchema keyword '%s' must be a "
                                                         "non-negative integer",
                               k);
        int64_t *dst = strcmp(k, "minLength") == 0       ? &s->min_len
                       : strcmp(k, "maxLength") == 0     ? &s->max_len
                       : strcmp(k, "minItems") == 0      ? &s->min_items
                       : strcmp(k, "maxItems") == 0      ? &s->max_items
                       : strcmp(k, "minProperties") == 0 ? &s->min_props
                                                         : &s->max_props;
        *dst = x;
        return 0;
    }
    if (strcmp(k, "enum") == 0) {
        bson_iter_t a;
        if (!BSON_ITER_HOLDS_ARRAY(it))
            return sbl_err_set(err, SBL_E_TypeMismatch,
                               "$jsonSchema keyword 'enum' must be an array");
        bson_iter_recurse(it, &a);
        while (bson_iter_next(&a)) {
            bson_value_t ev;
            sbl_iter_value(&a, &ev);
            s->enums = bson_realloc(s->enums, (s->nenum + 1) * sizeof(*s->enums));
            v_copy(&ev, &s->enums[s->nenum++]);
        }
        if (s->nenum == 0)
            return sbl_err_set(err, SBL_E_FailedToParse,
                               "$jsonSchema keyword 'enum' cannot be an empty array");
        return 0;
    }
    if (strcmp(k, "pattern") == 0) {
        if (!BSON_ITER_HOLDS_UTF8(it))
            return sbl_err_set(err, SBL_E_TypeMismatch,
                               "$jsonSchema keyword 'pattern' must be a string");
        s->pattern = compile_re(v.value.v_utf8.str, err);
        return s->pattern ? 0 : err->code;
    }
    if (strcmp(k, "items") == 0) {
        if (BSON_ITER_HOLDS_DOCUMENT(it)) {
            bson_t d;
            sub_doc(it, &d);
            return parse_node(&d, &s->items, depth + 1, err);
        }
        return parse_list(it, k, &s->items_arr, &s->nitems_arr, depth, err);
    }
    if (strcmp(k, "uniqueItems") == 0) {
        if (!BSON_ITER_HOLDS_BOOL(it))
            return sbl_err_set(err, SBL_E_TypeMismatch,
                               "$jsonSchema keyword 'uniqueItems' must be a boolean");
        s->unique = bson_iter_bool(it);
        return 0;
    }
    if (strcmp(k, "allOf") == 0)
        return parse_list(it, k, &s->all_of, &s->nall, depth, err);
    if (strcmp(k, "anyOf") == 0)
        return parse_list(it, k, &s->any_of, &s->nany, depth, err);
    if (strcmp(k, "oneOf") == 0)
        return parse_list(it, k, &s->one_of, &s->none, depth, err);
    if (strcmp(k, "not") == 0) {
        bson_t d;
        if (!BSON_ITER_HOLDS_DOCUMENT(it) || !sub_doc(it, &d))
            return sbl_err_set(err, SBL_E_TypeMismatch,
                               "$jsonSchema keyword 'not' must be an object");
        return parse_node(&d, &s->not_, depth + 1, err);
    }
    if (strcmp(k, "title") == 0 || strcmp(k, "description") == 0) {
        if (!BSON_ITER_HOLDS_UTF8(it))
            return sbl_err_set(err, SBL_E_TypeMismatch, "$jsonSchema keyword '%s' must be a "
                                                        "string",
                               k);
        return 0;
    }
    if (strcmp(k, "$ref") == 0 || strcmp(k, "$schema") == 0 || strcmp(k, "default") == 0 ||
        strcmp(k, "definitions") == 0 || strcmp(k, "format") == 0 || strcmp(k, "id") == 0 ||
        strcmp(k, "dependencies") == 0)
        return sbl_err_set(err, SBL_E_FailedToParse, "$jsonSchema keyword '%s' is not currently "
                                                     "supported",
                           k);
    return sbl_err_set(err, SBL_E_FailedToParse, "Unknown $jsonSchema keyword: %s", k);
}

static int parse_node(const bson_t *d, sbl_schema_t **sp, int depth, sbl_err_t *err)
{
    bson_iter_t it;
    sbl_schema_t *s = bson_malloc0(sizeof(*s));
    s->addl = -1;
    s->addl_items = -1;
    s->min_len = s->min_items = s->min_props = -1;
    s->max_len = s->max_items = s->max_props = -1;
    *sp = s;
    if (depth > 100)
        return sbl_err_set(err, SBL_E_BadValue, "$jsonSchema nested too deeply");
    bson_iter_init(&it, d);
    while (bson_iter_next(&it))
        SBL_RET(parse_kw(s, &it, depth, err));
    if (s->types != 0 && bson_has_field(d, "type") && bson_has_field(d, "bsonType"))
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "Cannot specify both $jsonSchema keywords 'type' and 'bsonType'");
    return 0;
}

int sbl_schema_parse(const bson_t *schema, sbl_schema_t **planp, sbl_err_t *err)
{
    int rc = parse_node(schema, planp, 0, err);
    if (rc != 0) {
        sbl_schema_free(*planp);
        *planp = NULL;
    }
    return rc;
}

static bool check(const sbl_schema_t *s, const bson_value_t *v);

static bool check_object(const sbl_schema_t *s, const bson_value_t *v)
{
    bson_t d;
    bson_iter_t it;
    v_doc(v, &d);
    for (size_t i = 0; i < s->nreq; i++)
        if (!bson_has_field(&d, s->required[i]))
            return false;
    uint32_t n = bson_count_keys(&d);
    if ((s->min_props >= 0 && n < s->min_props) || (s->max_props >= 0 && n > s->max_props))
        return false;
    bson_iter_init(&it, &d);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        bson_value_t fv;
        bool covered = false;
        sbl_iter_value(&it, &fv);
        for (size_t i = 0; i < s->nprops; i++)
            if (strcmp(s->pnames[i], k) == 0) {
                covered = true;
                if (!check(s->props[i], &fv))
                    return false;
            }
        for (size_t i = 0; i < s->npp; i++) {
            pcre2_match_data *md = pcre2_match_data_create_from_pattern(s->pp_re[i], NULL);
            int r = pcre2_match(s->pp_re[i], (PCRE2_SPTR)k, strlen(k), 0, 0, md, NULL);
            pcre2_match_data_free(md);
            if (r >= 0) {
                covered = true;
                if (!check(s->pp[i], &fv))
                    return false;
            }
        }
        if (!covered && s->addl == 0)
            return false;
        if (!covered && s->addl == 1 && !check(s->addl_schema, &fv))
            return false;
    }
    return true;
}

static bool check_array(const sbl_schema_t *s, const bson_value_t *v)
{
    bson_t d;
    bson_iter_t it;
    v_doc(v, &d);
    uint32_t n = bson_count_keys(&d);
    if ((s->min_items >= 0 && n < s->min_items) || (s->max_items >= 0 && n > s->max_items))
        return false;
    size_t i = 0;
    bson_iter_init(&it, &d);
    while (bson_iter_next(&it)) {
        bson_value_t ev;
        sbl_iter_value(&it, &ev);
        if (s->items && !check(s->items, &ev))
            return false;
        if (s->nitems_arr > 0) {
            if (i < s->nitems_arr && !check(s->items_arr[i], &ev))
                return false;
            if (i >= s->nitems_arr && s->addl_items == 0)
                return false;
        }
        if (s->unique) {
            bson_iter_t j;
            bson_iter_init(&j, &d);
            for (size_t k = 0; k < i && bson_iter_next(&j); k++) {
                bson_value_t jv;
                sbl_iter_value(&j, &jv);
                if (v_cmp(&jv, &ev) == 0)
                    return false;
            }
        }
        i++;
    }
    return true;
}

static bool check(const sbl_schema_t *s, const bson_value_t *v)
{
    if (s->types != 0 && (s->types & value_bit(v)) == 0)
        return false;
    if (s->nenum > 0) {
        bool hit = false;
        for (size_t i = 0; i < s->nenum && !hit; i++)
            hit = v_cmp(&s->enums[i], v) == 0 && s->enums[i].value_type != BSON_TYPE_EOD;
        if (!hit)
            return false;
    }
    if (v_is_num(v)) {
        double x = v_to_double(v);
        if (s->has_min && (s->excl_min ? x <= s->min : x < s->min))
            return false;
        if (s->has_max && (s->excl_max ? x >= s->max : x > s->max))
            return false;
        if (s->multiple > 0 && fmod(x, s->multiple) != 0)
            return false;
    }
    if (v->value_type == BSON_TYPE_UTF8) {
        int64_t n = 0;
        for (uint32_t i = 0; i < v->value.v_utf8.len; i++)
            if (((unsigned char)v->value.v_utf8.str[i] & 0xC0) != 0x80)
                n++;
        if ((s->min_len >= 0 && n < s->min_len) || (s->max_len >= 0 && n > s->max_len))
            return false;
        if (s->pattern) {
            pcre2_match_data *md = pcre2_match_data_create_from_pattern(s->pattern, NULL);
            int r = pcre2_match(s->pattern, (PCRE2_SPTR)v->value.v_utf8.str, v->value.v_utf8.len,
                                0, 0, md, NULL);
            pcre2_match_data_free(md);
            if (r < 0)
                return false;
        }
    }
    if (v->value_type == BSON_TYPE_DOCUMENT && !check_object(s, v))
        return false;
    if (v->value_type == BSON_TYPE_ARRAY && !check_array(s, v))
        return false;
    for (size_t i = 0; i < s->nall; i++)
        if (!check(s->all_of[i], v))
            return false;
    if (s->nany > 0) {
        bool any = false;
        for (size_t i = 0; i < s->nany && !any; i++)
            any = check(s->any_of[i], v);
        if (!any)
            return false;
    }
    if (s->none > 0) {
        size_t hits = 0;
        for (size_t i = 0; i < s->none; i++)
            hits += check(s->one_of[i], v);
        if (hits != 1)
            return false;
    }
    if (s->not_ && check(s->not_, v))
        return false;
    return true;
}

bool sbl_schema_match(const sbl_schema_t *s, const bson_t *doc)
{
    bson_value_t v;
    v.value_type = BSON_TYPE_DOCUMENT;
    v.value.v_doc.data = (uint8_t *)bson_get_data(doc);
    v.value.v_doc.data_len = doc->len;
    return check(s, &v);
}

/* ---- the matcher extensions ----------------------------------------------------------- */

static void *expr_parse(const bson_value_t *arg, sbl_err_t *err)
{
    sbl_expr_t *e = NULL;
    if (sbl_expr_parse(arg, &e, err) != 0)
        return NULL;
    return e;
}

int sbl_expr_take_match_error(sbl_err_t *err)
{
    return sbl_matcher_take_error(err);
}

static bool expr_match(const void *plan, const bson_t *doc, const sbl_collation_t *coll)
{
    sbl_expr_env_t env = {.root = doc, .coll = coll};
    bson_value_t v;
    sbl_err_t err = {0};
    if (sbl_expr_eval(plan, &env, &v, &err) != 0) {
        sbl_matcher_note_error(&err);
        return false; /* no match; the error waits for sbl_matcher_take_error */
    }
    bool t = sbl_expr_truthy(&v);
    bson_value_destroy(&v);
    return t;
}

static void expr_free(void *plan)
{
    sbl_expr_free(plan);
}

static void *schema_parse(const bson_value_t *arg, sbl_err_t *err)
{
    bson_t d;
    sbl_schema_t *s = NULL;
    if (!v_doc(arg, &d)) {
        sbl_err_set(err, SBL_E_TypeMismatch, "$jsonSchema must be an object");
        return NULL;
    }
    if (sbl_schema_parse(&d, &s, err) != 0)
        return NULL;
    return s;
}

static bool schema_match(const void *plan, const bson_t *doc, const sbl_collation_t *coll)
{
    return sbl_schema_match(plan, doc);
}

static void schema_free(void *plan)
{
    sbl_schema_free(plan);
}

/* A find projection's computed field ({a: "$b"}, {a: {$add: [...]}}). */
static int project_eval(const void *plan, const bson_t *root, const bson_t *let,
                        bson_value_t *out, sbl_err_t *err)
{
    sbl_expr_env_t env = {.root = root, .let = let};
    return sbl_expr_eval(plan, &env, out, err);
}

static const sbl_match_ext_t expr_ext = {expr_parse, expr_match, expr_free};
static const sbl_project_ext_t project_ext = {expr_parse, project_eval, expr_free};
static const sbl_match_ext_t schema_ext = {schema_parse, schema_match, schema_free};

void sbl_expr_init(void)
{
    sbl_matcher_register_ext("$expr", &expr_ext);
    sbl_matcher_register_ext("$jsonSchema", &schema_ext);
    sbl_projection_register_ext(&project_ext);
    sbl_expr_js_init(); /* $where */
}
