/*
 * test_fts.c: unit tests for text search's pieces in src/query (fts.c,
 * fts_stop.c): languages, folding, stop words, stemming, per-document term
 * scores (mongod's formula), the $search parser and the document checks.
 */
#include <math.h>
#include <string.h>

#include "check.h"
#include "query/query.h"

static double score_of(const sbl_fts_scores_t *s, const char *term)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->term[i], term) == 0)
            return s->score[i];
    return -1;
}

static bool near(double a, double b)
{
    return fabs(a - b) < 1e-9;
}

static void test_languages(void)
{
    CHECK(sbl_fts_lang("english") == sbl_fts_lang("en"));
    CHECK(sbl_fts_lang("spanish") >= 0 && sbl_fts_lang("es") == sbl_fts_lang("spanish"));
    CHECK(sbl_fts_lang("none") == 0);
    CHECK(sbl_fts_lang("klingon") == -1);
    CHECK(strcmp(sbl_fts_lang_name(sbl_fts_lang("de")), "german") == 0);
    /* every stop list is sorted (binary search) */
    CHECK(sbl_fts_nlanguages() == 16);
    for (size_t l = 0; l < sbl_fts_nlanguages(); l++) {
        const char *const *w;
        size_t n = sbl_fts_stop_words((int)l, &w);
        for (size_t i = 1; i < n; i++)
            CHECK_MSG(strcmp(w[i - 1], w[i]) < 0, "%s: %s", sbl_fts_lang_name((int)l), w[i]);
    }
    int en = sbl_fts_lang("english");
    CHECK(sbl_fts_stop_word(en, "the"));
    CHECK(sbl_fts_stop_word(en, "yourselves"));
    CHECK(!sbl_fts_stop_word(en, "coffee"));
    CHECK(!sbl_fts_stop_word(0, "the"));
}

static void test_fold(void)
{
    sbl_buf_t b;
    sbl_buf_init(&b);
    sbl_fts_fold("Café CRÈME", strlen("Café CRÈME"), false, false, &b);
    CHECK(b.len == 10 && memcmp(b.data, "cafe creme", 10) == 0);
    sbl_fts_fold("Café", strlen("Café"), true, false, &b);
    CHECK(b.len == 4 && memcmp(b.data, "Cafe", 4) == 0);
    sbl_fts_fold("Café", strlen("Café"), false, true, &b);
    CHECK(b.len == 5 && memcmp(b.data, "caf\xc3\xa9", 5) == 0);
    sbl_buf_destroy(&b);
}

static void test_scores(void)
{
    int en = sbl_fts_lang("english");
    sbl_fts_scores_t s;

    /* one term: coeff 1, and 1.1 when the whole string is the stemmed term */
    sbl_fts_scores_init(&s);
    sbl_fts_score_string("cake", 4, en, 1, &s);
    CHECK(s.n == 1 && near(score_of(&s, "cake"), 1.1));
    sbl_fts_scores_destroy(&s);

    /* stop words are not tokens; stems: running -> run, runs -> run */
    sbl_fts_scores_init(&s);
    const char *t = "The dogs are running and the dog runs";
    sbl_fts_score_string(t, strlen(t), en, 1, &s);
    CHECK(s.n == 2);
    /* tokens: dogs running dog runs (4); dog x2: freq 1.5, coeff 0.75 */
    CHECK(near(score_of(&s, "dog"), 1.5 * (0.5 * 2 / 4 + 0.5)));
    CHECK(near(score_of(&s, "run"), 1.5 * 0.75));
    sbl_fts_scores_destroy(&s);

    /* weights multiply; two strings add up */
    sbl_fts_scores_init(&s);
    sbl_fts_score_string("apple pie", 9, en, 10, &s);
    sbl_fts_score_string("apple", 5, en, 1, &s);
    CHECK(near(score_of(&s, "appl"), 10 * 0.75 + 1.0));
    sbl_fts_scores_destroy(&s);

    /* three occurrences: freq 1 + 1/2 + 1/4 */
    sbl_fts_scores_init(&s);
    sbl_fts_score_string("go go go", 8, sbl_fts_lang("none"), 1, &s);
    CHECK(near(score_of(&s, "go"), 1.75 * 1.0));
    sbl_fts_scores_destroy(&s);

    /* Spanish stemming and stop words */
    sbl_fts_scores_init(&s);
    sbl_fts_score_string("los niños corren", strlen("los niños corren"), sbl_fts_lang("es"), 1,
                         &s);
    CHECK(s.n == 2 && score_of(&s, "los") < 0 && score_of(&s, "corr") > 0);
    sbl_fts_scores_destroy(&s);
}

static void test_doc_scores(void)
{
    bson_t *spec = BCON_NEW("weights", "{", "title", BCON_INT32(5), "body", BCON_INT32(1), "}",
                            "language_override", "lang");
    sbl_fts_spec_t *sp = sbl_fts_spec_new(spec);
    bson_t *doc = BCON_NEW("title", "tea", "body", "[", "tea time", "]", "other", "tea");
    sbl_fts_scores_t s;
    sbl_err_t err;
    sbl_err_clear(&err);
    sbl_fts_scores_init(&s);
    CHECK(sbl_fts_doc_scores(sp, doc, &s, &err) == 0);
    CHECK(near(score_of(&s, "tea"), 5 * 1.1 + 0.75));
    sbl_fts_scores_destroy(&s);
    bson_t *bad = BCON_NEW("title", "x", "lang", "klingon");
    sbl_fts_scores_init(&s);
    CHECK(sbl_fts_doc_scores(sp, bad, &s, &err) == 17262);
    sbl_fts_scores_destroy(&s);
    bson_destroy(bad);
    bson_destroy(doc);
    bson_destroy(spec);
    sbl_fts_spec_free(sp);
}

static void test_query(void)
{
    int en = sbl_fts_lang("english");
    sbl_fts_query_t *q = sbl_fts_query_parse("Running \"coffee shop\" -tea -\"green leaf\" the",
                                             en, false, false);
    CHECK(q->terms.n == 3); /* run, coffe, shop */
    CHECK(q->neg_terms.n == 1 && strcmp(q->neg_terms.term[0], "tea") == 0);
    CHECK(q->phrases.n == 1 && strcmp(q->phrases.term[0], "coffee shop") == 0);
    CHECK(q->neg_phrases.n == 1 && strcmp(q->neg_phrases.term[0], "green leaf") == 0);
    CHECK(sbl_fts_query_needs_doc(q));

    bson_t *spec = BCON_NEW("weights", "{", "s", BCON_INT32(1), "}");
    sbl_fts_spec_t *sp = sbl_fts_spec_new(spec);
    bson_t *yes = BCON_NEW("s", "Coffee Shop running");
    bson_t *neg = BCON_NEW("s", "coffee shop teas");
    bson_t *nophrase = BCON_NEW("s", "shop coffee");
    CHECK(sbl_fts_query_match(q, sp, yes));
    CHECK(!sbl_fts_query_match(q, sp, neg));
    CHECK(!sbl_fts_query_match(q, sp, nophrase));
    sbl_fts_query_free(q);

    q = sbl_fts_query_parse("Coffee", en, true, false);
    CHECK(sbl_fts_query_needs_doc(q));
    CHECK(sbl_fts_query_match(q, sp, yes));
    CHECK(!sbl_fts_query_match(q, sp, neg));
    sbl_fts_query_free(q);

    bson_destroy(yes);
    bson_destroy(neg);
    bson_destroy(nophrase);
    bson_destroy(spec);
    sbl_fts_spec_free(sp);
}

static void test_meta(void)
{
    sbl_err_t err;
    sbl_err_clear(&err);
    bson_t *doc = BCON_NEW("_id", BCON_INT32(1), "a", "x", SBL_TEXT_SCORE_FIELD, BCON_DOUBLE(1.5));
    bson_t *spec = BCON_NEW("s", "{", "$meta", "textScore", "}");
    sbl_projection_t *p = sbl_projection_new(spec, &err);
    CHECK(p != NULL && sbl_projection_has_meta(p));
    bson_t out = BSON_INITIALIZER;
    bson_iter_t it;
    CHECK(p != NULL && sbl_projection_apply(p, doc, -1, &out, &err) == 0);
    CHECK(bson_iter_init_find(&it, &out, "s") && bson_iter_double(&it) == 1.5);
    CHECK(bson_iter_init_find(&it, &out, "a"));
    CHECK(!bson_iter_init_find(&it, &out, SBL_TEXT_SCORE_FIELD));
    bson_destroy(&out);
    sbl_projection_free(p);

    bson_t stripped = BSON_INITIALIZER;
    sbl_projection_strip_meta(doc, &stripped);
    CHECK(bson_count_keys(&stripped) == 2);
    bson_destroy(&stripped);

    bool only = false;
    sbl_sort_t *so = sbl_sort_new(spec, &err);
    CHECK(so != NULL && sbl_sort_text_score(so, &only) && only);
    bson_t *lo = BCON_NEW(SBL_TEXT_SCORE_FIELD, BCON_DOUBLE(0.5));
    CHECK(so != NULL && sbl_sort_compare(so, doc, lo) < 0); /* highest first */
    sbl_sort_free(so);
    bson_destroy(lo);
    bson_destroy(spec);
    bson_destroy(doc);
}

int main(void)
{
    test_meta();
    test_languages();
    test_fold();
    test_scores();
    test_doc_scores();
    test_query();
    return CHECK_DONE("test_fts");
}
