/*
 * fts.c: text search's language pieces: tokenising, case and diacritic
 * folding (ICU), stop words (fts_stop.c), Snowball stemming (libstemmer),
 * the per-document term scores of a text index and the $search parser.
 *
 * Scores follow mongod's published text index version 3 behaviour: for each
 * string a field holds, with n its non-stop tokens and, for each term t
 * occurring c times, freq = sum over occurrences k = 0..c-1 of 1/2^k,
 * score(t) += weight * freq * (0.5 * c / n + 0.5) * (1.1 if the whole string
 * is the term, else 1); a query's score for a document is the sum of its
 * query terms' scores.
 *
 * What must stay true: the index (sbl_fts_doc_scores) and the query
 * (sbl_fts_query_parse) produce terms with the same function (fts_term), so
 * what one writes the other finds.  libstemmer's stemmers are not thread
 * safe: each thread keeps its own.
 */
#include "query/query.h"
#include "query/fts_int.h"

#include <libstemmer.h>
#include <stdlib.h>
#include <string.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/utf8.h>

/* ---- languages ----------------------------------------------------------- */

int sbl_fts_lang(const char *name)
{
    for (size_t i = 0; i < sbl_fts_nlangs; i++)
        if (strcmp(name, sbl_fts_langs[i].name) == 0 || strcmp(name, sbl_fts_langs[i].code) == 0)
            return (int)i;
    return -1;
}

const char *sbl_fts_lang_name(int lang)
{
    return lang >= 0 && (size_t)lang < sbl_fts_nlangs ? sbl_fts_langs[lang].name : "none";
}

size_t sbl_fts_stop_words(int lang, const char *const **wordsp)
{
    *wordsp = sbl_fts_langs[lang].stop;
    return sbl_fts_langs[lang].nstop;
}

size_t sbl_fts_nlanguages(void)
{
    return sbl_fts_nlangs;
}

bool sbl_fts_stop_word(int lang, const char *w)
{
    const sbl_fts_lang_t *l = &sbl_fts_langs[lang];
    size_t lo = 0, hi = l->nstop;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(w, l->stop[mid]);
        if (c == 0)
            return true;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return false;
}

#define MAX_LANGS 32
static _Thread_local struct sb_stemmer *tls_stemmers[MAX_LANGS];

/* The stem of w (len bytes) into out (NUL-terminated), or w itself. */
static void stem(int lang, const char *w, size_t len, sbl_buf_t *out)
{
    const char *alg = sbl_fts_langs[lang].snowball;
    sbl_buf_reset(out);
    if (alg != NULL && lang < MAX_LANGS) {
        if (tls_stemmers[lang] == NULL)
            tls_stemmers[lang] = sb_stemmer_new(alg, "UTF_8");
        struct sb_stemmer *st = tls_stemmers[lang];
        if (st != NULL) {
            const sb_symbol *s = sb_stemmer_stem(st, (const sb_symbol *)w, (int)len);
            if (s != NULL) {
                sbl_buf_append(out, s, (size_t)sb_stemmer_length(st));
                sbl_buf_append(out, "", 1);
                return;
            }
        }
    }
    sbl_buf_append(out, w, len);
    sbl_buf_append(out, "", 1);
}

/* ---- tokens and folding ------------------------------------------------------ */

static bool token_char(UChar32 c)
{
    if (c < 0x80)
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    int8_t t = u_charType(c);
    return u_isalnum(c) || t == U_NON_SPACING_MARK || t == U_COMBINING_SPACING_MARK;
}

/* Append c to out, folded: lower case unless case_sens, without its
 * diacritics (combining marks of its canonical decomposition) unless diac_sens. */
static void fold_char(UChar32 c, bool case_sens, bool diac_sens, sbl_buf_t *out)
{
    if (c < 0x80) {
        char ch = (char)(!case_sens && c >= 'A' && c <= 'Z' ? c + 32 : c);
        sbl_buf_append(out, &ch, 1);
        return;
    }
    UChar32 cs[8];
    int n = 0;
    if (!diac_sens) {
        UErrorCode ec = U_ZERO_ERROR;
        const UNormalizer2 *nfd = unorm2_getNFDInstance(&ec);
        UChar dec[16];
        int32_t dl = U_SUCCESS(ec) ? unorm2_getDecomposition(nfd, c, dec, 16, &ec) : -1;
        if (dl > 0 && U_SUCCESS(ec)) {
            int32_t i = 0;
            while (i < dl && n < 8) {
                UChar32 d;
                U16_NEXT(dec, i, dl, d);
                int8_t t = u_charType(d);
                if (t != U_NON_SPACING_MARK && t != U_COMBINING_SPACING_MARK &&
                    t != U_ENCLOSING_MARK)
                    cs[n++] = d;
            }
        } else {
            int8_t t = u_charType(c);
            if (t == U_NON_SPACING_MARK || t == U_COMBINING_SPACING_MARK || t == U_ENCLOSING_MARK)
                return; /* a lone combining mark */
            cs[n++] = c;
        }
    } else
        cs[n++] = c;
    for (int i = 0; i < n; i++) {
        UChar32 f = case_sens ? cs[i] : u_foldCase(cs[i], U_FOLD_CASE_DEFAULT);
        uint8_t enc[4];
        int32_t el = 0;
        UBool bad = 0;
        U8_APPEND(enc, el, 4, f, bad);
        if (!bad)
            sbl_buf_append(out, enc, (size_t)el);
    }
}

void sbl_fts_fold(const char *s, size_t len, bool case_sens, bool diac_sens, sbl_buf_t *out)
{
    int32_t i = 0;
    sbl_buf_reset(out);
    while ((size_t)i < len) {
        UChar32 c;
        U8_NEXT(s, i, (int32_t)len, c);
        if (c >= 0)
            fold_char(c, case_sens, diac_sens, out);
    }
}

/* Call fn for each token of s (folded per the flags) with whether it is a stop word and
 * its stem (NULL for stop words). */
typedef void (*token_fn)(void *arg, const char *folded, size_t flen, const char *stemmed);

static void tokens(const char *s, size_t len, int lang, bool case_sens, bool diac_sens,
                   token_fn fn, void *arg)
{
    sbl_buf_t tok, low, st;
    int32_t i = 0;
    sbl_buf_init(&tok);
    sbl_buf_init(&low);
    sbl_buf_init(&st);
    while ((size_t)i <= len) {
        UChar32 c = -1;
        if ((size_t)i < len)
            U8_NEXT(s, i, (int32_t)len, c);
        else
            i++;
        if (c >= 0 && token_char(c)) {
            fold_char(c, case_sens, diac_sens, &tok);
            continue;
        }
        if (tok.len == 0)
            continue;
        /* stop words are recognised folded, whatever the sensitivity */
        const char *lw;
        if (case_sens || diac_sens) {
            sbl_fts_fold((const char *)tok.data, tok.len, false, false, &low);
            sbl_buf_append(&low, "", 1);
            lw = (const char *)low.data;
        } else {
            sbl_buf_append(&tok, "", 1);
            tok.len--;
            lw = (const char *)tok.data;
        }
        if (sbl_fts_stop_word(lang, lw))
            fn(arg, (const char *)tok.data, tok.len, NULL);
        else {
            stem(lang, (const char *)tok.data, tok.len, &st);
            fn(arg, (const char *)tok.data, tok.len, (const char *)st.data);
        }
        sbl_buf_reset(&tok);
    }
    sbl_buf_destroy(&tok);
    sbl_buf_destroy(&low);
    sbl_buf_destroy(&st);
}

/* ---- term scores ------------------------------------------------------------------ */

void sbl_fts_scores_init(sbl_fts_scores_t *s)
{
    memset(s, 0, sizeof(*s));
}

void sbl_fts_scores_destroy(sbl_fts_scores_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->term[i]);
    free(s->term);
    free(s->score);
    memset(s, 0, sizeof(*s));
}

/* The slot of term (added with score 0 when absent). */
static double *scores_slot(sbl_fts_scores_t *s, const char *term)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->term[i], term) == 0)
            return &s->score[i];
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->term = realloc(s->term, s->cap * sizeof(char *));
        s->score = realloc(s->score, s->cap * sizeof(double));
    }
    s->term[s->n] = strdup(term);
    s->score[s->n] = 0;
    return &s->score[s->n++];
}

typedef struct str_terms {
    sbl_fts_scores_t count, freq, exp; /* per term: occurrences, sum of 1/2^k, 2^k */
    size_t ntokens;
} str_terms_t;

static void count_token(void *arg, const char *folded, size_t flen, const char *stemmed)
{
    str_terms_t *t = arg;
    (void)folded;
    (void)flen;
    if (stemmed == NULL)
        return;
    double *e = scores_slot(&t->exp, stemmed);
    *e = *e == 0 ? 1 : *e * 2;
    *scores_slot(&t->count, stemmed) += 1;
    *scores_slot(&t->freq, stemmed) += 1 / *e;
    t->ntokens++;
}

void sbl_fts_score_string(const char *s, size_t len, int lang, double weight,
                          sbl_fts_scores_t *out)
{
    str_terms_t t;
    memset(&t, 0, sizeof(t));
    tokens(s, len, lang, false, false, count_token, &t);
    for (size_t i = 0; i < t.count.n; i++) {
        const char *term = t.count.term[i];
        double coeff = 0.5 * t.count.score[i] / (double)t.ntokens + 0.5;
        double adj = 1;
        if (strlen(term) == len && strncasecmp(term, s, len) == 0)
            adj += 0.1;
        *scores_slot(out, term) += weight * t.freq.score[i] * coeff * adj;
    }
    sbl_fts_scores_destroy(&t.count);
    sbl_fts_scores_destroy(&t.freq);
    sbl_fts_scores_destroy(&t.exp);
}

/* ---- a text index's spec ------------------------------------------------------------- */

void sbl_fts_spec_free(sbl_fts_spec_t *sp)
{
    if (sp == NULL)
        return;
    for (size_t i = 0; i < sp->nweights; i++)
        free(sp->fields[i]);
    free(sp->fields);
    free(sp->weights);
    free(sp->lang_override);
    free(sp);
}

sbl_fts_spec_t *sbl_fts_spec_new(const bson_t *spec)
{
    sbl_fts_spec_t *sp = calloc(1, sizeof(*sp));
    bson_iter_t it, w;
    sp->default_lang = sbl_fts_lang("english");
    sp->lang_override = strdup("language");
    if (bson_iter_init_find(&it, spec, "weights") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &w))
        while (bson_iter_next(&w)) {
            sp->fields = realloc(sp->fields, (sp->nweights + 1) * sizeof(char *));
            sp->weights = realloc(sp->weights, (sp->nweights + 1) * sizeof(double));
            sp->fields[sp->nweights] = strdup(bson_iter_key(&w));
            sp->weights[sp->nweights] = bson_iter_as_double(&w);
            if (strcmp(bson_iter_key(&w), "$**") == 0) {
                sp->wildcard = true;
                sp->wildcard_weight = sp->weights[sp->nweights];
            }
            sp->nweights++;
        }
    if (bson_iter_init_find(&it, spec, "default_language") && BSON_ITER_HOLDS_UTF8(&it)) {
        int l = sbl_fts_lang(bson_iter_utf8(&it, NULL));
        if (l >= 0)
            sp->default_lang = l;
    }
    if (bson_iter_init_find(&it, spec, "language_override") && BSON_ITER_HOLDS_UTF8(&it)) {
        free(sp->lang_override);
        sp->lang_override = strdup(bson_iter_utf8(&it, NULL));
    }
    return sp;
}

/* The weight of the field at path (dotted, array indexes left out), or 0. */
static double field_weight(const sbl_fts_spec_t *sp, const char *path)
{
    for (size_t i = 0; i < sp->nweights; i++)
        if (strcmp(sp->fields[i], path) == 0)
            return sp->weights[i];
    return sp->wildcard ? sp->wildcard_weight : 0;
}

static bool weighted_prefix(const sbl_fts_spec_t *sp, const char *path, size_t plen)
{
    if (sp->wildcard)
        return true;
    for (size_t i = 0; i < sp->nweights; i++)
        if (strncmp(sp->fields[i], path, plen) == 0 &&
            (sp->fields[i][plen] == '\0' || sp->fields[i][plen] == '.'))
            return true;
    return false;
}

typedef void (*string_fn)(void *arg, const char *s, size_t len, int lang, double weight);

/* Visit each string at an indexed path of the document d (prefix: its path so far). */
static int walk(const sbl_fts_spec_t *sp, const bson_t *d, char *prefix, size_t plen, int lang,
                string_fn fn, void *arg, sbl_err_t *err)
{
    bson_iter_t it;
    if (bson_iter_init_find(&it, d, sp->lang_override)) {
        if (!BSON_ITER_HOLDS_UTF8(&it))
            return sbl_err_set(err, 17261, "found language override field in document with "
                               "non-string type");
        int l = sbl_fts_lang(bson_iter_utf8(&it, NULL));
        if (l < 0)
            return sbl_err_set(err, 17262, "language override unsupported: %s",
                               bson_iter_utf8(&it, NULL));
        lang = l;
    }
    if (!bson_iter_init(&it, d))
        return 0;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        size_t kl = strlen(k), nl = plen + (plen ? 1 : 0) + kl;
        if (nl >= 1024)
            continue;
        char saved = prefix[plen];
        if (plen)
            prefix[plen] = '.';
        memcpy(prefix + plen + (plen ? 1 : 0), k, kl + 1);
        int rc = 0;
        if (weighted_prefix(sp, prefix, nl)) {
            bson_value_t v;
            sbl_iter_value(&it, &v);
            if (v.value_type == BSON_TYPE_UTF8) {
                double w = field_weight(sp, prefix);
                if (w > 0)
                    fn(arg, v.value.v_utf8.str, v.value.v_utf8.len, lang, w);
            } else if (v.value_type == BSON_TYPE_DOCUMENT) {
                bson_t sub;
                if (bson_init_static(&sub, v.value.v_doc.data, v.value.v_doc.data_len))
                    rc = walk(sp, &sub, prefix, nl, lang, fn, arg, err);
            } else if (v.value_type == BSON_TYPE_ARRAY) {
                bson_iter_t ai;
                double w = field_weight(sp, prefix);
                if (bson_iter_recurse(&it, &ai))
                    while (rc == 0 && bson_iter_next(&ai)) {
                        if (BSON_ITER_HOLDS_UTF8(&ai) && w > 0) {
                            uint32_t l;
                            const char *s = bson_iter_utf8(&ai, &l);
                            fn(arg, s, l, lang, w);
                        } else if (BSON_ITER_HOLDS_DOCUMENT(&ai)) {
                            bson_t sub;
                            bson_value_t e;
                            sbl_iter_value(&ai, &e);
                            if (bson_init_static(&sub, e.value.v_doc.data, e.value.v_doc.data_len))
                                rc = walk(sp, &sub, prefix, nl, lang, fn, arg, err);
                        }
                    }
            }
        }
        prefix[plen] = saved;
        if (rc != 0)
            return rc;
    }
    return 0;
}

static void score_cb(void *arg, const char *s, size_t len, int lang, double weight)
{
    sbl_fts_score_string(s, len, lang, weight, arg);
}

int sbl_fts_doc_scores(const sbl_fts_spec_t *sp, const bson_t *doc, sbl_fts_scores_t *out,
                       sbl_err_t *err)
{
    char prefix[1024] = "";
    return walk(sp, doc, prefix, 0, sp->default_lang, score_cb, out, err);
}

/* ---- $search ----------------------------------------------------------------------- */

void sbl_fts_query_free(sbl_fts_query_t *q)
{
    if (q == NULL)
        return;
    sbl_fts_scores_destroy(&q->terms);
    sbl_fts_scores_destroy(&q->neg_terms);
    sbl_fts_scores_destroy(&q->phrases);
    sbl_fts_scores_destroy(&q->neg_phrases);
    sbl_fts_scores_destroy(&q->sens_terms);
    free(q);
}

typedef struct qctx {
    sbl_fts_query_t *q;
    bool neg;
} qctx_t;

static void query_token(void *arg, const char *folded, size_t flen, const char *stemmed)
{
    qctx_t *c = arg;
    (void)folded;
    (void)flen;
    if (stemmed == NULL)
        return;
    scores_slot(c->neg ? &c->q->neg_terms : &c->q->terms, stemmed);
}

static void sens_token(void *arg, const char *folded, size_t flen, const char *stemmed)
{
    if (stemmed != NULL)
        scores_slot(arg, stemmed);
}

/* Add the terms of one word or phrase of the search string. */
static void query_words(sbl_fts_query_t *q, const char *s, size_t len, bool neg)
{
    qctx_t c = {q, neg};
    tokens(s, len, q->lang, false, false, query_token, &c);
    if (!neg && (q->case_sens || q->diac_sens))
        tokens(s, len, q->lang, q->case_sens, q->diac_sens, sens_token, &q->sens_terms);
}

static void add_phrase(sbl_fts_scores_t *set, const char *s, size_t len)
{
    char *p = strndup(s, len);
    scores_slot(set, p);
    free(p);
}

sbl_fts_query_t *sbl_fts_query_parse(const char *search, int lang, bool case_sens,
                                     bool diac_sens)
{
    sbl_fts_query_t *q = calloc(1, sizeof(*q));
    size_t len = strlen(search), i = 0;
    q->lang = lang;
    q->case_sens = case_sens;
    q->diac_sens = diac_sens;
    while (i < len) {
        char ch = search[i];
        if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
            i++;
            continue;
        }
        bool neg = false;
        if (ch == '-') {
            neg = true;
            i++;
        }
        if (i < len && search[i] == '"') {
            size_t start = ++i;
            while (i < len && search[i] != '"')
                i++;
            if (i > start) {
                add_phrase(neg ? &q->neg_phrases : &q->phrases, search + start, i - start);
                if (!neg)
                    query_words(q, search + start, i - start, false);
            }
            i++; /* the closing quote */
            continue;
        }
        size_t start = i;
        while (i < len && search[i] != ' ' && search[i] != '\t' && search[i] != '\n' &&
               search[i] != '\r' && search[i] != '"')
            i++;
        query_words(q, search + start, i - start, neg);
    }
    return q;
}

/* ---- checking a document against the parts the index cannot answer ------------------- */

typedef struct doc_check {
    const sbl_fts_query_t *q;
    bool neg_term, sens_term, phrase_ok[64], neg_phrase;
    sbl_buf_t a, b;
} doc_check_t;

static void neg_token(void *arg, const char *folded, size_t flen, const char *stemmed)
{
    doc_check_t *c = arg;
    if (stemmed == NULL)
        return;
    for (size_t i = 0; i < c->q->neg_terms.n; i++)
        if (strcmp(c->q->neg_terms.term[i], stemmed) == 0)
            c->neg_term = true;
}

static void sens_doc_token(void *arg, const char *folded, size_t flen, const char *stemmed)
{
    doc_check_t *c = arg;
    if (stemmed == NULL)
        return;
    for (size_t i = 0; i < c->q->sens_terms.n; i++)
        if (strcmp(c->q->sens_terms.term[i], stemmed) == 0)
            c->sens_term = true;
}

/* Does s contain phrase p under the query's sensitivity? */
static bool has_phrase(doc_check_t *c, const char *s, size_t len, const char *p)
{
    sbl_fts_fold(s, len, c->q->case_sens, c->q->diac_sens, &c->a);
    sbl_buf_append(&c->a, "", 1);
    sbl_fts_fold(p, strlen(p), c->q->case_sens, c->q->diac_sens, &c->b);
    sbl_buf_append(&c->b, "", 1);
    return strstr((const char *)c->a.data, (const char *)c->b.data) != NULL;
}

static void check_string(void *arg, const char *s, size_t len, int lang, double weight)
{
    doc_check_t *c = arg;
    const sbl_fts_query_t *q = c->q;
    (void)weight;
    if (q->neg_terms.n > 0)
        tokens(s, len, q->lang, false, false, neg_token, c);
    if (q->sens_terms.n > 0)
        tokens(s, len, q->lang, q->case_sens, q->diac_sens, sens_doc_token, c);
    for (size_t i = 0; i < q->phrases.n && i < 64; i++)
        if (!c->phrase_ok[i] && has_phrase(c, s, len, q->phrases.term[i]))
            c->phrase_ok[i] = true;
    for (size_t i = 0; i < q->neg_phrases.n; i++)
        if (has_phrase(c, s, len, q->neg_phrases.term[i]))
            c->neg_phrase = true;
}

bool sbl_fts_query_needs_doc(const sbl_fts_query_t *q)
{
    return q->neg_terms.n > 0 || q->phrases.n > 0 || q->neg_phrases.n > 0 || q->case_sens ||
           q->diac_sens;
}

bool sbl_fts_query_match(const sbl_fts_query_t *q, const sbl_fts_spec_t *sp, const bson_t *doc)
{
    doc_check_t c;
    char prefix[1024] = "";
    sbl_err_t e;
    memset(&c, 0, sizeof(c));
    c.q = q;
    sbl_buf_init(&c.a);
    sbl_buf_init(&c.b);
    sbl_err_clear(&e);
    walk(sp, doc, prefix, 0, sp->default_lang, check_string, &c, &e);
    sbl_buf_destroy(&c.a);
    sbl_buf_destroy(&c.b);
    if (c.neg_term || c.neg_phrase)
        return false;
    if ((q->case_sens || q->diac_sens) && q->sens_terms.n > 0 && !c.sens_term)
        return false;
    for (size_t i = 0; i < q->phrases.n && i < 64; i++)
        if (!c.phrase_ok[i])
            return false;
    return true;
}
