/*
 * collation.c: MongoDB collations on ICU.  A collation document is parsed and
 * checked the way MongoDB does, opened once per distinct document (a process-wide
 * cache) and then used to compare strings or to turn them into ICU sort keys.
 *
 * What must stay true:
 *  - Cached entries are never freed while the process runs, so a
 *    const sbl_collation_t * stays valid in matchers, sorts, cursors and indexes.
 *  - The opened collator (master) is only ever cloned, under the cache lock;
 *    comparisons use the calling thread's own clone (a per-thread table indexed
 *    by the entry's id), because ICU collators are not safe for every use from
 *    many threads at once.
 *  - For two strings a, b: sign(sbl_collation_compare(a, b)) equals memcmp order
 *    of their sort keys (ICU guarantees it: strcoll and getSortKey agree).
 *  - Nothing here runs for the simple (binary) collation: that is a NULL pointer.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <unicode/ucol.h>
#include <unicode/uloc.h>
#include <unicode/ustring.h>

#include "doc/doc.h"

#define MAX_COLLATIONS 1024 /* distinct collation documents one process will open */
#define E_MISSING_FIELD 40414
#define E_UNKNOWN_FIELD 40415

struct sbl_collation {
    size_t id;         /* index into each thread's clone table */
    UCollator *master; /* cloned only, under cache_mu */
    bson_t *spec;      /* the full spec as MongoDB reports it */
    char *request;     /* the normalised request this entry was opened for (cache key) */
};

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static sbl_collation_t **cache;
static size_t ncache;

/* ---- parsing ---------------------------------------------------------------- */

typedef struct request {
    char locale[ULOC_FULLNAME_CAPACITY];
    int strength;     /* 0: locale default, else 1..5 */
    int case_level;   /* -1: default, 0, 1 */
    int case_first;   /* -1: default, 0 off, 1 upper, 2 lower */
    int numeric;      /* -1 / 0 / 1 */
    int alternate;    /* -1, 0 non-ignorable, 1 shifted */
    int max_variable; /* -1, 0 punct, 1 space */
    int normalization;
    int backwards;
} request_t;

static int type_error(sbl_err_t *err, const char *field, const bson_iter_t *it, const char *want)
{
    return sbl_err_set(err, SBL_E_TypeMismatch,
                       "BSON field 'Collation.%s' is the wrong type '%s', expected type '%s'",
                       field, sbl_type_name(bson_iter_type(it)), want);
}

static int get_bool(const bson_iter_t *it, const char *field, int *out, sbl_err_t *err)
{
    if (!BSON_ITER_HOLDS_BOOL(it))
        return type_error(err, field, it, "bool");
    *out = bson_iter_bool(it) ? 1 : 0;
    return 0;
}

/* Index of the iterator's string among names (NULL-terminated); FailedToParse otherwise. */
static int get_enum(const bson_iter_t *it, const char *field, const char *const *names, int *out,
                    const char *expect, sbl_err_t *err)
{
    if (!BSON_ITER_HOLDS_UTF8(it))
        return type_error(err, field, it, "string");
    const char *s = bson_iter_utf8(it, NULL);
    for (int i = 0; names[i] != NULL; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    return sbl_err_set(err, SBL_E_FailedToParse, "Field '%s' must be %s. Got: %s", field, expect, s);
}

static int get_strength(const bson_iter_t *it, int *out, sbl_err_t *err)
{
    double d;
    if (BSON_ITER_HOLDS_INT32(it))
        d = bson_iter_int32(it);
    else if (BSON_ITER_HOLDS_INT64(it))
        d = (double)bson_iter_int64(it);
    else if (BSON_ITER_HOLDS_DOUBLE(it))
        d = bson_iter_double(it);
    else
        return type_error(err, "strength", it, "int");
    if (!(d >= 1 && d <= 5) || d != (double)(int)d)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "Field 'strength' must be an integer 1 through 5. Got: %g", d);
    *out = (int)d;
    return 0;
}

static int parse_request(const bson_t *spec, request_t *r, bool *simplep, sbl_err_t *err)
{
    static const char *const case_first[] = {"off", "upper", "lower", NULL};
    static const char *const alternate[] = {"non-ignorable", "shifted", NULL};
    static const char *const max_variable[] = {"punct", "space", NULL};
    bson_iter_t it;
    bool have_locale = false;
    int nfields = 0, rc = 0;

    memset(r, 0, sizeof(*r));
    r->case_level = r->case_first = r->numeric = r->alternate = r->max_variable = -1;
    r->normalization = r->backwards = -1;
    if (!bson_iter_init(&it, spec))
        return sbl_err_set(err, SBL_E_FailedToParse, "malformed collation document");
    while (rc == 0 && bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        nfields++;
        if (strcmp(k, "locale") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return type_error(err, k, &it, "string");
            uint32_t len;
            const char *s = bson_iter_utf8(&it, &len);
            if (len == 0 || len >= sizeof(r->locale) || strlen(s) != len)
                return sbl_err_set(err, SBL_E_BadValue,
                                   "Field 'locale' is invalid in: { locale: \"%.64s\" }", s);
            memcpy(r->locale, s, len + 1);
            have_locale = true;
        } else if (strcmp(k, "strength") == 0) {
            rc = get_strength(&it, &r->strength, err);
        } else if (strcmp(k, "caseLevel") == 0) {
            rc = get_bool(&it, k, &r->case_level, err);
        } else if (strcmp(k, "caseFirst") == 0) {
            rc = get_enum(&it, k, case_first, &r->case_first, "'upper', 'lower', or 'off'", err);
        } else if (strcmp(k, "numericOrdering") == 0) {
            rc = get_bool(&it, k, &r->numeric, err);
        } else if (strcmp(k, "alternate") == 0) {
            rc = get_enum(&it, k, alternate, &r->alternate, "'non-ignorable' or 'shifted'", err);
        } else if (strcmp(k, "maxVariable") == 0) {
            rc = get_enum(&it, k, max_variable, &r->max_variable, "'punct' or 'space'", err);
        } else if (strcmp(k, "normalization") == 0) {
            rc = get_bool(&it, k, &r->normalization, err);
        } else if (strcmp(k, "backwards") == 0) {
            rc = get_bool(&it, k, &r->backwards, err);
        } else if (strcmp(k, "version") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return type_error(err, k, &it, "string");
        } else {
            return sbl_err_set(err, E_UNKNOWN_FIELD, "BSON field 'Collation.%s' is an unknown field.",
                               k);
        }
    }
    if (rc != 0)
        return rc;
    if (!have_locale)
        return sbl_err_set(err, E_MISSING_FIELD,
                           "BSON field 'Collation.locale' is missing but a required field");
    *simplep = strcmp(r->locale, "simple") == 0;
    if (*simplep && nfields > 1)
        return sbl_err_set(err, SBL_E_FailedToParse,
                           "If locale=simple, no other fields should be present in the collation");
    return 0;
}

/* The cache key: every field, "-" when left to the locale. */
static void request_key(const request_t *r, char *buf, size_t len)
{
    snprintf(buf, len, "%s|%d|%d|%d|%d|%d|%d|%d|%d", r->locale, r->strength, r->case_level,
             r->case_first, r->numeric, r->alternate, r->max_variable, r->normalization,
             r->backwards);
}

/* ---- opening ------------------------------------------------------------------ */

static void set_attr(UCollator *c, UColAttribute a, int v, UColAttributeValue on,
                     UColAttributeValue off, UErrorCode *st)
{
    if (v >= 0)
        ucol_setAttribute(c, a, v ? on : off, st);
}

static bool is_on(UCollator *c, UColAttribute a)
{
    UErrorCode st = U_ZERO_ERROR;
    return ucol_getAttribute(c, a, &st) == UCOL_ON;
}

/* Is the locale one ICU knows (not just its root fallback)? */
static bool locale_valid(const char *want, UCollator *c)
{
    if (strcmp(want, "root") == 0)
        return true;
    UErrorCode st = U_ZERO_ERROR;
    const char *got = ucol_getLocaleByType(c, ULOC_VALID_LOCALE, &st);
    if (U_FAILURE(st) || got == NULL || strcmp(got, "root") == 0 || got[0] == '\0')
        return false;
    /* ICU falls back from an unknown region or variant to the language: refuse
     * anything whose canonical form is not what ICU found or a region of it. */
    char canon[ULOC_FULLNAME_CAPACITY];
    st = U_ZERO_ERROR;
    uloc_canonicalize(want, canon, sizeof(canon), &st);
    if (U_FAILURE(st))
        return false;
    size_t n = strlen(got);
    if (strncmp(canon, got, n) != 0 || (canon[n] != '\0' && canon[n] != '_' && canon[n] != '@'))
        return false;
    char country[16];
    st = U_ZERO_ERROR;
    int32_t cn = uloc_getCountry(canon, country, sizeof(country), &st);
    if (U_FAILURE(st))
        return false;
    if (cn > 0) {
        /* A region must be a real one for the language (en_US yes, en_XX no). */
        const char *const *regions = uloc_getISOCountries();
        bool known = false;
        for (size_t i = 0; regions[i] != NULL && !known; i++)
            known = strcmp(regions[i], country) == 0;
        if (!known)
            return false;
    }
    return true;
}

/* The full spec, MongoDB's field order; the collator's effective settings. */
static bson_t *full_spec(const request_t *r, UCollator *c)
{
    bson_t *s = bson_new();
    UErrorCode st = U_ZERO_ERROR;
    BSON_APPEND_UTF8(s, "locale", r->locale);
    BSON_APPEND_BOOL(s, "caseLevel", is_on(c, UCOL_CASE_LEVEL));
    UColAttributeValue cf = ucol_getAttribute(c, UCOL_CASE_FIRST, &st);
    BSON_APPEND_UTF8(s, "caseFirst",
                     cf == UCOL_UPPER_FIRST ? "upper" : cf == UCOL_LOWER_FIRST ? "lower" : "off");
    st = U_ZERO_ERROR;
    UColAttributeValue sv = ucol_getAttribute(c, UCOL_STRENGTH, &st);
    int strength = sv == UCOL_PRIMARY      ? 1
                   : sv == UCOL_SECONDARY  ? 2
                   : sv == UCOL_TERTIARY   ? 3
                   : sv == UCOL_QUATERNARY ? 4
                                           : 5;
    BSON_APPEND_INT32(s, "strength", strength);
    BSON_APPEND_BOOL(s, "numericOrdering", is_on(c, UCOL_NUMERIC_COLLATION));
    st = U_ZERO_ERROR;
    BSON_APPEND_UTF8(s, "alternate",
                     ucol_getAttribute(c, UCOL_ALTERNATE_HANDLING, &st) == UCOL_SHIFTED
                         ? "shifted"
                         : "non-ignorable");
    BSON_APPEND_UTF8(s, "maxVariable",
                     ucol_getMaxVariable(c) == UCOL_REORDER_CODE_SPACE ? "space" : "punct");
    BSON_APPEND_BOOL(s, "normalization", is_on(c, UCOL_NORMALIZATION_MODE));
    BSON_APPEND_BOOL(s, "backwards", is_on(c, UCOL_FRENCH_COLLATION));
    BSON_APPEND_UTF8(s, "version", "57.1"); /* what MongoDB 7.0 reports */
    return s;
}

static int open_collator(const request_t *r, UCollator **outp, sbl_err_t *err)
{
    static const UColAttributeValue strengths[] = {UCOL_PRIMARY, UCOL_SECONDARY, UCOL_TERTIARY,
                                                   UCOL_QUATERNARY, UCOL_IDENTICAL};
    UErrorCode st = U_ZERO_ERROR;
    UCollator *c = ucol_open(r->locale, &st);

    *outp = NULL;
    if (U_FAILURE(st) || c == NULL || !locale_valid(r->locale, c)) {
        if (c != NULL)
            ucol_close(c);
        return sbl_err_set(err, SBL_E_BadValue, "Field 'locale' is invalid in: { locale: \"%s\" }",
                           r->locale);
    }
    st = U_ZERO_ERROR;
    if (r->strength > 0)
        ucol_setAttribute(c, UCOL_STRENGTH, strengths[r->strength - 1], &st);
    set_attr(c, UCOL_CASE_LEVEL, r->case_level, UCOL_ON, UCOL_OFF, &st);
    if (r->case_first >= 0)
        ucol_setAttribute(c, UCOL_CASE_FIRST,
                          r->case_first == 1   ? UCOL_UPPER_FIRST
                          : r->case_first == 2 ? UCOL_LOWER_FIRST
                                               : UCOL_OFF,
                          &st);
    set_attr(c, UCOL_NUMERIC_COLLATION, r->numeric, UCOL_ON, UCOL_OFF, &st);
    set_attr(c, UCOL_ALTERNATE_HANDLING, r->alternate, UCOL_SHIFTED, UCOL_NON_IGNORABLE, &st);
    if (r->max_variable >= 0)
        ucol_setMaxVariable(c, r->max_variable ? UCOL_REORDER_CODE_SPACE
                                               : UCOL_REORDER_CODE_PUNCTUATION, &st);
    set_attr(c, UCOL_NORMALIZATION_MODE, r->normalization, UCOL_ON, UCOL_OFF, &st);
    set_attr(c, UCOL_FRENCH_COLLATION, r->backwards, UCOL_ON, UCOL_OFF, &st);
    if (U_FAILURE(st)) {
        ucol_close(c);
        return sbl_err_set(err, SBL_E_BadValue, "cannot apply the collation to locale %s: %s",
                           r->locale, u_errorName(st));
    }
    *outp = c;
    return 0;
}

int sbl_collation_parse(const bson_t *spec, const sbl_collation_t **outp, sbl_err_t *err)
{
    request_t r;
    bool simple = false;
    char key[ULOC_FULLNAME_CAPACITY + 64];
    int rc;

    *outp = NULL;
    if ((rc = parse_request(spec, &r, &simple, err)) != 0 || simple)
        return rc;
    request_key(&r, key, sizeof(key));
    pthread_mutex_lock(&cache_mu);
    for (size_t i = 0; i < ncache; i++) {
        if (strcmp(cache[i]->request, key) == 0) {
            *outp = cache[i];
            pthread_mutex_unlock(&cache_mu);
            return 0;
        }
    }
    if (ncache == MAX_COLLATIONS) {
        pthread_mutex_unlock(&cache_mu);
        return sbl_err_set(err, SBL_E_BadValue, "too many distinct collations in use (%d)",
                           MAX_COLLATIONS);
    }
    UCollator *u;
    if ((rc = open_collator(&r, &u, err)) != 0) {
        pthread_mutex_unlock(&cache_mu);
        return rc;
    }
    sbl_collation_t *c = bson_malloc0(sizeof(*c));
    c->id = ncache;
    c->master = u;
    c->spec = full_spec(&r, u);
    c->request = bson_strdup(key);
    cache = bson_realloc(cache, (ncache + 1) * sizeof(*cache));
    cache[ncache++] = c;
    *outp = c;
    pthread_mutex_unlock(&cache_mu);
    return 0;
}

int sbl_collation_from_iter(const bson_iter_t *it, const char *field,
                            const sbl_collation_t **outp, sbl_err_t *err)
{
    bson_t spec;
    *outp = NULL;
    if (!sbl_iter_doc(it, &spec))
        return sbl_err_set(err, SBL_E_TypeMismatch,
                           "BSON field '%s' is the wrong type '%s', expected type 'object'", field,
                           sbl_type_name(bson_iter_type(it)));
    return sbl_collation_parse(&spec, outp, err);
}

const bson_t *sbl_collation_spec(const sbl_collation_t *c)
{
    return c->spec;
}

bool sbl_collation_equal(const sbl_collation_t *a, const sbl_collation_t *b)
{
    if (a == b)
        return true;
    if (a == NULL || b == NULL)
        return false;
    return a->spec->len == b->spec->len &&
           memcmp(bson_get_data(a->spec), bson_get_data(b->spec), a->spec->len) == 0;
}

/* ---- the calling thread's collators -------------------------------------------- */

static pthread_key_t tl_key;
static pthread_once_t tl_once = PTHREAD_ONCE_INIT;
static _Thread_local UCollator **tl_clones;
static _Thread_local size_t tl_n;

typedef struct clones {
    UCollator **v;
    size_t n;
} clones_t;

static void clones_free(void *p)
{
    clones_t *cl = p;
    for (size_t i = 0; i < cl->n; i++) {
        if (cl->v[i] != NULL)
            ucol_close(cl->v[i]);
    }
    free(cl->v);
    free(cl);
}

static void tl_key_init(void)
{
    pthread_key_create(&tl_key, clones_free);
}

/* This thread's clone of c, made on first use; NULL only when ICU fails. */
static UCollator *thread_collator(const sbl_collation_t *c)
{
    if (c->id < tl_n && tl_clones[c->id] != NULL)
        return tl_clones[c->id];
    pthread_once(&tl_once, tl_key_init);
    clones_t *cl = pthread_getspecific(tl_key);
    if (cl == NULL) {
        cl = calloc(1, sizeof(*cl));
        if (cl == NULL)
            return NULL;
        pthread_setspecific(tl_key, cl);
    }
    if (c->id >= cl->n) {
        size_t n = c->id + 8;
        UCollator **v = realloc(cl->v, n * sizeof(*v));
        if (v == NULL)
            return NULL;
        memset(v + cl->n, 0, (n - cl->n) * sizeof(*v));
        cl->v = v;
        cl->n = n;
    }
    if (cl->v[c->id] == NULL) {
        UErrorCode st = U_ZERO_ERROR;
        pthread_mutex_lock(&cache_mu);
        cl->v[c->id] = ucol_clone(c->master, &st);
        pthread_mutex_unlock(&cache_mu);
        if (U_FAILURE(st))
            cl->v[c->id] = NULL;
    }
    tl_clones = cl->v;
    tl_n = cl->n;
    return cl->v[c->id];
}

/* ---- comparing and sort keys ----------------------------------------------------- */

static int bytes_cmp(const char *a, size_t la, const char *b, size_t lb)
{
    size_t n = la < lb ? la : lb;
    int r = n ? memcmp(a, b, n) : 0;
    if (r != 0)
        return r < 0 ? -1 : 1;
    return (la > lb) - (la < lb);
}

int sbl_collation_compare(const sbl_collation_t *c, const char *a, size_t la, const char *b,
                          size_t lb)
{
    UCollator *u = thread_collator(c);
    UErrorCode st = U_ZERO_ERROR;
    if (u == NULL)
        return bytes_cmp(a, la, b, lb);
    UCollationResult r = ucol_strcollUTF8(u, a, (int32_t)la, b, (int32_t)lb, &st);
    if (U_FAILURE(st))
        return bytes_cmp(a, la, b, lb);
    return r == UCOL_LESS ? -1 : r == UCOL_GREATER ? 1 : 0;
}

void sbl_collation_sort_key(const sbl_collation_t *c, const char *s, size_t len, sbl_buf_t *out)
{
    UChar stack[256], *u = stack;
    int32_t ulen = 0;
    UErrorCode st = U_ZERO_ERROR;
    UCollator *coll = thread_collator(c);

    if (coll != NULL) {
        u_strFromUTF8WithSub(u, 256, &ulen, s, (int32_t)len, 0xFFFD, NULL, &st);
        if (st == U_BUFFER_OVERFLOW_ERROR) {
            u = malloc(((size_t)ulen + 1) * sizeof(UChar));
            st = U_ZERO_ERROR;
            if (u != NULL)
                u_strFromUTF8WithSub(u, ulen + 1, &ulen, s, (int32_t)len, 0xFFFD, NULL, &st);
        }
    }
    int32_t need = 0;
    if (coll != NULL && u != NULL && U_SUCCESS(st)) {
        int32_t cap = 64 + ulen * 4;
        for (;;) {
            uint8_t *dst = sbl_buf_reserve(out, (size_t)cap);
            need = ucol_getSortKey(coll, u, ulen, dst, cap);
            if (need <= cap)
                break;
            cap = need;
        }
    }
    if (need > 0) {
        out->len += (size_t)need; /* the key ends with its single 00 byte */
    } else {
        /* ICU failed: bytes without NULs (0x01 for each), terminated, still ordered. */
        for (size_t i = 0; i < len; i++)
            sbl_buf_append_byte(out, s[i] ? (uint8_t)s[i] : 0x01);
        sbl_buf_append_byte(out, 0x00);
    }
    if (u != stack)
        free(u);
}
