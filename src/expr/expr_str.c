/*
 * expr_str.c: the string operators of the expression language ($concat,
 * $substr*, $toLower/$toUpper, $strcasecmp, $trim family, $split,
 * $strLen*, $indexOf*, $replaceOne/$replaceAll) and the regular-expression
 * ones ($regexMatch, $regexFind, $regexFindAll, through PCRE2).
 *
 * What must stay true: strings are UTF-8 and the *CP operators count code
 * points, the *Bytes ones bytes; null or missing inputs give null where
 * MongoDB gives null, and type errors use MongoDB's codes and wording.
 */
#include "expr/expr_int.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "doc/doc.h"

/* ---- strings ------------------------------------------------------------------------- */

/* Evaluate kid i as a string; *nullp when nullish (if allowed).  The string is a copy in v. */
static int str_arg(const sbl_expr_t *e, size_t i, ectx_t *c, bson_value_t *v, bool *nullp,
                   int code, const char *what, sbl_err_t *err)
{
    SBL_RET(ex_kid(e, i, c, v, err));
    *nullp = v_nullish(v);
    if (!*nullp && v->value_type != BSON_TYPE_UTF8 && v->value_type != BSON_TYPE_SYMBOL) {
        int rc = sbl_err_set(err, code, "%s %s, not %s", e->op->name, what,
                             sbl_type_name(v->value_type));
        bson_value_destroy(v);
        v_missing(v);
        return rc;
    }
    return 0;
}

int op_concat(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_string_t *s = bson_string_new(NULL);
    bool isnull = false;
    for (size_t i = 0; i < e->n; i++) {
        bson_value_t v;
        bool n;
        int rc = str_arg(e, i, c, &v, &n, 16702, "only supports strings", err);
        if (rc != 0) {
            bson_string_free(s, true);
            return rc;
        }
        if (n)
            isnull = true;
        else
            bson_string_append(s, v.value.v_utf8.str);
        bson_value_destroy(&v);
    }
    if (isnull)
        v_null(out);
    else
        v_str(out, s->str, s->len);
    bson_string_free(s, true);
    return 0;
}

/* Convert a value to its string form for $substr etc. (numbers and dates allowed). */
static int coerce_str(const bson_value_t *v, bson_value_t *out, const char *op, sbl_err_t *err)
{
    if (v_nullish(v)) {
        v_str(out, "", 0);
        return 0;
    }
    if (v->value_type == BSON_TYPE_UTF8) {
        v_copy(v, out);
        return 0;
    }
    if (v_is_num(v) || v->value_type == BSON_TYPE_DATE_TIME || v->value_type == BSON_TYPE_TIMESTAMP)
        return ex_convert(v, BSON_TYPE_UTF8, out, err);
    return sbl_err_set(err, 16007, "can't convert from BSON type %s to String",
                       sbl_type_name(v->value_type));
}

static int utf8_len(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* $substrBytes / $substr and $substrCP. */
static int substr(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err, bool cp)
{
    bson_value_t s, sv, a, b;
    int64_t start, len;
    int rc = 0;
    SBL_RET(ex_kid(e, 0, c, &s, err));
    rc = coerce_str(&s, &sv, e->op->name, err);
    bson_value_destroy(&s);
    if (rc != 0)
        return rc;
    v_missing(&a);
    v_missing(&b);
    if ((rc = ex_kid(e, 1, c, &a, err)) != 0 || (rc = ex_kid(e, 2, c, &b, err)) != 0)
        goto done;
    if (!v_is_num(&a) || !v_to_i64(&a, &start) || (cp && start < 0)) {
        rc = sbl_err_set(err, cp ? 34450 : 16034,
                         "%s: starting index must be a numeric type (is BSON type %s)",
                         e->op->name, sbl_type_name(a.value_type));
        goto done;
    }
    if (!v_is_num(&b) || !v_to_i64(&b, &len)) {
        rc = sbl_err_set(err, cp ? 34452 : 16035,
                         "%s: length must be a numeric type (is BSON type %s)", e->op->name,
                         sbl_type_name(b.value_type));
        goto done;
    }
    const char *str = sv.value.v_utf8.str;
    size_t n = sv.value.v_utf8.len;
    if (!cp) {
        if (start < 0)
            start = (int64_t)n;
        size_t st = (size_t)start < n ? (size_t)start : n;
        if (st < n && (str[st] & 0xC0) == 0x80) {
            rc = sbl_err_set(err, 28656, "$substrBytes:  Invalid range, starting index is a UTF-8 "
                                         "continuation byte.");
            goto done;
        }
        size_t l = len < 0 || (size_t)len > n - st ? n - st : (size_t)len;
        if (st + l < n && (str[st + l] & 0xC0) == 0x80) {
            rc = sbl_err_set(err, 28657, "$substrBytes:  Invalid range, ending index is in the "
                                         "middle of a UTF-8 character.");
            goto done;
        }
        v_str(out, str + st, l);
    } else {
        size_t i = 0;
        int64_t k = 0;
        while (i < n && k < start) {
            i += (size_t)utf8_len((unsigned char)str[i]);
            k++;
        }
        size_t j = i;
        k = 0;
        while (j < n && (len < 0 || k < len)) {
            j += (size_t)utf8_len((unsigned char)str[j]);
            k++;
        }
        if (j > n)
            j = n;
        v_str(out, str + i, j - i);
    }
done:
    bson_value_destroy(&sv);
    bson_value_destroy(&a);
    bson_value_destroy(&b);
    return rc;
}

int op_substrBytes(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return substr(e, c, out, err, false);
}

int op_substrCP(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return substr(e, c, out, err, true);
}

static int change_case(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err,
                       bool upper)
{
    bson_value_t s, sv;
    SBL_RET(ex_kid(e, 0, c, &s, err));
    int rc = coerce_str(&s, &sv, e->op->name, err);
    bson_value_destroy(&s);
    if (rc != 0)
        return rc;
    for (uint32_t i = 0; i < sv.value.v_utf8.len; i++) {
        char ch = sv.value.v_utf8.str[i];
        sv.value.v_utf8.str[i] = (char)(upper ? toupper((unsigned char)ch) : tolower((unsigned char)ch));
        if ((unsigned char)ch >= 0x80)
            sv.value.v_utf8.str[i] = ch;
    }
    *out = sv;
    return 0;
}

int op_toLower(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return change_case(e, c, out, err, false);
}

int op_toUpper(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return change_case(e, c, out, err, true);
}

int op_strcasecmp(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t a, b, as, bs;
    SBL_RET(ex_kid(e, 0, c, &a, err));
    int rc = ex_kid(e, 1, c, &b, err);
    if (rc == 0 && (rc = coerce_str(&a, &as, "$strcasecmp", err)) == 0) {
        if ((rc = coerce_str(&b, &bs, "$strcasecmp", err)) == 0) {
            int r = strcasecmp(as.value.v_utf8.str, bs.value.v_utf8.str);
            v_i32(out, r < 0 ? -1 : r > 0);
            bson_value_destroy(&bs);
        }
        bson_value_destroy(&as);
    }
    bson_value_destroy(&a);
    bson_value_destroy(&b);
    return rc;
}

static bool is_ws_cp(const char *s, size_t n, size_t *lenp)
{
    static const char *const ws[] = {" ", "\t", "\n", "\v", "\f", "\r", "\xc2\xa0", "\0",
                                     "\xe1\x9a\x80", "\xe2\x80\x80", "\xe2\x80\x81",
                                     "\xe2\x80\x82", "\xe2\x80\x83", "\xe2\x80\x84",
                                     "\xe2\x80\x85", "\xe2\x80\x86", "\xe2\x80\x87",
                                     "\xe2\x80\x88", "\xe2\x80\x89", "\xe2\x80\x8a",
                                     "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80"};
    for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++) {
        size_t l = ws[i][0] == '\0' ? 1 : strlen(ws[i]);
        if (l <= n && memcmp(s, ws[i], l) == 0) {
            *lenp = l;
            return true;
        }
    }
    return false;
}

/* Does the code point at s[0..l) appear in chars? */
static bool in_chars(const char *s, size_t l, const char *chars, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t cl = (size_t)utf8_len((unsigned char)chars[i]);
        if (cl == l && memcmp(chars + i, s, l) == 0)
            return true;
        i += cl;
    }
    return false;
}

static int trim(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err, bool left,
                bool right)
{
    bson_value_t in, ch;
    bool n1, n2 = false;
    SBL_RET(str_arg(e, 0, c, &in, &n1, 50699, "requires its input to be a string, got", err));
    int rc = 0;
    v_missing(&ch);
    if (e->kids[1] != NULL &&
        (rc = str_arg(e, 1, c, &ch, &n2, 50700, "requires 'chars' to be a string, got", err)) != 0) {
        bson_value_destroy(&in);
        return rc;
    }
    if (n1 || n2) {
        v_null(out);
    } else {
        const char *s = in.value.v_utf8.str;
        size_t b = 0, end = in.value.v_utf8.len, l;
        bool custom = ch.value_type == BSON_TYPE_UTF8;
        while (left && b < end) {
            l = (size_t)utf8_len((unsigned char)s[b]);
            if (custom ? in_chars(s + b, l, ch.value.v_utf8.str, ch.value.v_utf8.len)
                       : is_ws_cp(s + b, end - b, &l))
                b += l;
            else
                break;
        }
        while (right && end > b) {
            size_t st = end - 1;
            while (st > b && ((unsigned char)s[st] & 0xC0) == 0x80)
                st--;
            l = end - st;
            size_t wl;
            if (custom ? in_chars(s + st, l, ch.value.v_utf8.str, ch.value.v_utf8.len)
                       : (is_ws_cp(s + st, l, &wl) && wl == l))
                end = st;
            else
                break;
        }
        v_str(out, s + b, end - b);
    }
    bson_value_destroy(&in);
    bson_value_destroy(&ch);
    return 0;
}

int op_trim(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return trim(e, c, out, err, true, true);
}

int op_ltrim(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return trim(e, c, out, err, true, false);
}

int op_rtrim(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return trim(e, c, out, err, false, true);
}

int op_split(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    bson_value_t s, d;
    SBL_RET(ex_kid(e, 0, c, &s, err));
    int rc = ex_kid(e, 1, c, &d, err);
    if (rc == 0 && !v_nullish(&s) && s.value_type != BSON_TYPE_UTF8)
        rc = sbl_err_set(err, 40085, "$split requires an expression that evaluates to a string "
                                     "as a first argument, found: %s",
                         sbl_type_name(s.value_type));
    else if (rc == 0 && !v_nullish(&s) && d.value_type != BSON_TYPE_UTF8)
        rc = sbl_err_set(err, 40086, "$split requires an expression that evaluates to a string "
                                     "as a second argument, found: %s",
                         sbl_type_name(d.value_type));
    else if (rc == 0 && !v_nullish(&s) && d.value.v_utf8.len == 0)
        rc = sbl_err_set(err, 40087, "$split requires a non-empty separator");
    if (rc == 0 && v_nullish(&s)) {
        v_null(out);
    } else if (rc == 0) {
        bson_t arr = BSON_INITIALIZER;
        char kb[16];
        uint32_t k = 0;
        const char *p = s.value.v_utf8.str, *end = p + s.value.v_utf8.len;
        size_t dl = d.value.v_utf8.len;
        for (;;) {
            const char *hit = NULL;
            for (const char *q = p; q + dl <= end; q++)
                if (memcmp(q, d.value.v_utf8.str, dl) == 0) {
                    hit = q;
                    break;
                }
            const char *stop = hit ? hit : end;
            bson_append_utf8(&arr, v_key(k++, kb), -1, p, (int)(stop - p));
            if (hit == NULL)
                break;
            p = hit + dl;
        }
        v_take_doc(out, &arr, true);
    }
    bson_value_destroy(&s);
    bson_value_destroy(&d);
    return rc;
}

static int str_len(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err, bool cp)
{
    bson_value_t s;
    SBL_RET(ex_kid(e, 0, c, &s, err));
    if (s.value_type != BSON_TYPE_UTF8) {
        int rc = sbl_err_set(err, cp ? 34471 : 34473,
                             "%s requires a string argument, found: %s", e->op->name,
                             sbl_type_name(s.value_type));
        bson_value_destroy(&s);
        return rc;
    }
    int64_t n = 0;
    if (!cp) {
        n = s.value.v_utf8.len;
    } else {
        for (uint32_t i = 0; i < s.value.v_utf8.len; i++)
            if (((unsigned char)s.value.v_utf8.str[i] & 0xC0) != 0x80)
                n++;
    }
    v_i32(out, (int32_t)n);
    bson_value_destroy(&s);
    return 0;
}

int op_strLenBytes(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return str_len(e, c, out, err, false);
}

int op_strLenCP(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return str_len(e, c, out, err, true);
}

/* Byte offset of code point k in s (or len). */
static size_t cp_offset(const char *s, size_t len, int64_t k)
{
    size_t i = 0;
    while (i < len && k > 0) {
        i += (size_t)utf8_len((unsigned char)s[i]);
        k--;
    }
    return i < len ? i : len;
}

static int index_of(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err, bool cp)
{
    bson_value_t s, sub, a, b;
    int rc = 0;
    int64_t start = 0, end = -1;
    v_missing(&s);
    v_missing(&sub);
    v_missing(&a);
    v_missing(&b);
    if ((rc = ex_kid(e, 0, c, &s, err)) != 0 || (rc = ex_kid(e, 1, c, &sub, err)) != 0 ||
        (rc = ex_kid(e, 2, c, &a, err)) != 0 || (rc = ex_kid(e, 3, c, &b, err)) != 0)
        goto done;
    if (v_nullish(&s)) {
        v_null(out);
        goto done;
    }
    if (s.value_type != BSON_TYPE_UTF8) {
        rc = sbl_err_set(err, 40091, "%s requires a string as the first argument, found: %s",
                         e->op->name, sbl_type_name(s.value_type));
        goto done;
    }
    if (sub.value_type != BSON_TYPE_UTF8) {
        rc = sbl_err_set(err, 40092, "%s requires a string as the second argument, found: %s",
                         e->op->name, sbl_type_name(sub.value_type));
        goto done;
    }
    if (a.value_type != BSON_TYPE_EOD && (!v_to_i64(&a, &start) || start < 0)) {
        rc = sbl_err_set(err, 40097, "%s requires a nonnegative integral starting index",
                         e->op->name);
        goto done;
    }
    if (b.value_type != BSON_TYPE_EOD && (!v_to_i64(&b, &end) || end < 0)) {
        rc = sbl_err_set(err, 40097, "%s requires a nonnegative integral ending index",
                         e->op->name);
        goto done;
    }
    const char *str = s.value.v_utf8.str;
    size_t n = s.value.v_utf8.len, sl = sub.value.v_utf8.len;
    size_t bs = cp ? cp_offset(str, n, start) : ((size_t)start < n ? (size_t)start : n);
    size_t be = end < 0 ? n : cp ? cp_offset(str, n, end) : ((size_t)end < n ? (size_t)end : n);
    if ((size_t)start > n && !cp) {
        v_i32(out, -1);
        goto done;
    }
    int64_t found = -1;
    for (size_t i = bs; i + sl <= be; i++) {
        if (memcmp(str + i, sub.value.v_utf8.str, sl) == 0) {
            if (!cp) {
                found = (int64_t)i;
            } else {
                found = 0;
                for (size_t j = 0; j < i; j++)
                    if (((unsigned char)str[j] & 0xC0) != 0x80)
                        found++;
            }
            break;
        }
    }
    v_i32(out, (int32_t)found);
done:
    bson_value_destroy(&s);
    bson_value_destroy(&sub);
    bson_value_destroy(&a);
    bson_value_destroy(&b);
    return rc;
}

int op_indexOfBytes(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return index_of(e, c, out, err, false);
}

int op_indexOfCP(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return index_of(e, c, out, err, true);
}

static int replace(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err, bool all)
{
    bson_value_t v[3];
    int rc = 0;
    bool isnull = false;
    size_t got = 0;
    for (; got < 3 && rc == 0; got++) {
        rc = ex_kid(e, got, c, &v[got], err);
        if (rc != 0)
            break;
        if (v_nullish(&v[got]))
            isnull = true;
        else if (v[got].value_type != BSON_TYPE_UTF8) {
            static const char *const what[] = {"input", "find", "replacement"};
            rc = sbl_err_set(err, 51746, "%s requires that '%s' be a string, found: %s",
                             e->op->name, what[got], sbl_type_name(v[got].value_type));
            got++;
            break;
        }
    }
    if (rc == 0 && isnull) {
        v_null(out);
    } else if (rc == 0) {
        bson_string_t *s = bson_string_new(NULL);
        const char *p = v[0].value.v_utf8.str, *end = p + v[0].value.v_utf8.len;
        const char *f = v[1].value.v_utf8.str;
        size_t fl = v[1].value.v_utf8.len;
        bool done = false;
        while (p <= end) {
            const char *hit = NULL;
            if (!done)
                for (const char *q = p; q + fl <= end; q++)
                    if (memcmp(q, f, fl) == 0) {
                        hit = q;
                        break;
                    }
            if (hit == NULL) {
                char *tail = bson_strndup(p, (size_t)(end - p));
                bson_string_append(s, tail);
                bson_free(tail);
                break;
            }
            char *head = bson_strndup(p, (size_t)(hit - p));
            bson_string_append(s, head);
            bson_free(head);
            bson_string_append(s, v[2].value.v_utf8.str);
            if (fl == 0) {
                if (hit < end)
                    bson_string_append_c(s, *hit);
                p = hit + 1;
            } else {
                p = hit + fl;
            }
            if (!all)
                done = true;
        }
        v_str(out, s->str, s->len);
        bson_string_free(s, true);
    }
    for (size_t i = 0; i < got && i < 3; i++)
        bson_value_destroy(&v[i]);
    return rc;
}

int op_replaceOne(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return replace(e, c, out, err, false);
}

int op_replaceAll(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return replace(e, c, out, err, true);
}

/* ---- regular expressions ------------------------------------------------------------ */

typedef struct rx {
    pcre2_code *code;
    pcre2_match_data *md;
    bson_value_t input;
} rx_t;

static int rx_setup(const sbl_expr_t *e, ectx_t *c, rx_t *r, bool *nullp, sbl_err_t *err)
{
    bson_value_t re, opt;
    int rc = 0;
    const char *pattern = NULL, *flags = "";
    memset(r, 0, sizeof(*r));
    v_missing(&re);
    v_missing(&opt);
    *nullp = false;
    if ((rc = ex_kid(e, 0, c, &r->input, err)) != 0 || (rc = ex_kid(e, 1, c, &re, err)) != 0 ||
        (rc = ex_kid(e, 2, c, &opt, err)) != 0)
        goto done;
    if (!v_nullish(&r->input) && r->input.value_type != BSON_TYPE_UTF8) {
        rc = sbl_err_set(err, 51104, "%s needs 'input' to be of type string", e->op->name);
        goto done;
    }
    if (re.value_type == BSON_TYPE_REGEX) {
        pattern = re.value.v_regex.regex;
        flags = re.value.v_regex.options;
    } else if (re.value_type == BSON_TYPE_UTF8) {
        pattern = re.value.v_utf8.str;
    } else if (!v_nullish(&re)) {
        rc = sbl_err_set(err, 51105, "%s needs 'regex' to be of type string or regex",
                         e->op->name);
        goto done;
    }
    if (opt.value_type == BSON_TYPE_UTF8) {
        if (re.value_type == BSON_TYPE_REGEX && re.value.v_regex.options[0] != '\0') {
            rc = sbl_err_set(err, 51107, "%s found regex option(s) specified in both 'regex' "
                                         "and 'option' fields",
                             e->op->name);
            goto done;
        }
        flags = opt.value.v_utf8.str;
    } else if (!v_nullish(&opt)) {
        rc = sbl_err_set(err, 51106, "%s needs 'options' to be of type string", e->op->name);
        goto done;
    }
    if (v_nullish(&r->input) || pattern == NULL) {
        *nullp = true;
        goto done;
    }
    uint32_t o = PCRE2_UTF;
    for (const char *f = flags; *f; f++) {
        switch (*f) {
        case 'i': o |= PCRE2_CASELESS; break;
        case 'm': o |= PCRE2_MULTILINE; break;
        case 's': o |= PCRE2_DOTALL; break;
        case 'x': o |= PCRE2_EXTENDED; break;
        default:
            rc = sbl_err_set(err, 51108, "%s invalid flag in regex options: %c", e->op->name, *f);
            goto done;
        }
    }
    int ec;
    PCRE2_SIZE eo;
    r->code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, o, &ec, &eo, NULL);
    if (r->code == NULL) {
        rc = sbl_err_set(err, 51111, "Invalid Regex in %s", e->op->name);
        goto done;
    }
    r->md = pcre2_match_data_create_from_pattern(r->code, NULL);
done:
    bson_value_destroy(&re);
    bson_value_destroy(&opt);
    return rc;
}

static void rx_free(rx_t *r)
{
    if (r->md)
        pcre2_match_data_free(r->md);
    if (r->code)
        pcre2_code_free(r->code);
    bson_value_destroy(&r->input);
}

/* Append {match, idx, captures} for the match at ov to out under key. */
static void rx_result(const rx_t *r, int n, bson_t *out, const char *key)
{
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(r->md);
    const char *s = r->input.value.v_utf8.str;
    bson_t d, caps;
    char kb[16];
    int32_t idx = 0;
    for (size_t i = 0; i < ov[0]; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            idx++;
    bson_append_document_begin(out, key, -1, &d);
    bson_append_utf8(&d, "match", -1, s + ov[0], (int)(ov[1] - ov[0]));
    bson_append_int32(&d, "idx", -1, idx);
    bson_append_array_begin(&d, "captures", -1, &caps);
    uint32_t ncap = 0;
    pcre2_pattern_info(r->code, PCRE2_INFO_CAPTURECOUNT, &ncap);
    for (uint32_t i = 1; i <= ncap; i++) {
        if ((int)i < n && ov[2 * i] != PCRE2_UNSET)
            bson_append_utf8(&caps, v_key(i - 1, kb), -1, s + ov[2 * i],
                             (int)(ov[2 * i + 1] - ov[2 * i]));
        else
            bson_append_null(&caps, v_key(i - 1, kb), -1);
    }
    bson_append_array_end(&d, &caps);
    bson_append_document_end(out, &d);
}

static int regex_op(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err, int mode)
{
    rx_t r;
    bool isnull;
    int rc = rx_setup(e, c, &r, &isnull, err);
    if (rc != 0 || isnull) {
        if (rc == 0) {
            if (mode == 0)
                v_bool(out, false);
            else if (mode == 1)
                v_null(out);
            else {
                bson_t arr = BSON_INITIALIZER;
                v_take_doc(out, &arr, true);
            }
        }
        rx_free(&r);
        return rc;
    }
    const char *s = r.input.value.v_utf8.str;
    size_t len = r.input.value.v_utf8.len, at = 0;
    bson_t arr = BSON_INITIALIZER;
    uint32_t k = 0;
    char kb[16];
    bool any = false;
    for (;;) {
        int n = pcre2_match(r.code, (PCRE2_SPTR)s, len, at, 0, r.md, NULL);
        if (n < 0)
            break;
        any = true;
        if (mode == 0)
            break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(r.md);
        if (mode == 1) {
            bson_t wrap = BSON_INITIALIZER;
            bson_iter_t it;
            rx_result(&r, n, &wrap, "r");
            bson_iter_init_find(&it, &wrap, "r");
            bson_value_t v;
            sbl_iter_value(&it, &v);
            v_copy(&v, out);
            bson_destroy(&wrap);
            break;
        }
        rx_result(&r, n, &arr, v_key(k++, kb));
        at = ov[1] > ov[0] ? ov[1] : ov[1] + 1;
        if (at > len)
            break;
    }
    if (mode == 0)
        v_bool(out, any);
    else if (mode == 1 && !any)
        v_null(out);
    if (mode == 2)
        v_take_doc(out, &arr, true);
    else
        bson_destroy(&arr);
    rx_free(&r);
    return 0;
}

int op_regexMatch(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return regex_op(e, c, out, err, 0);
}

int op_regexFind(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return regex_op(e, c, out, err, 1);
}

int op_regexFindAll(const sbl_expr_t *e, ectx_t *c, bson_value_t *out, sbl_err_t *err)
{
    return regex_op(e, c, out, err, 2);
}
