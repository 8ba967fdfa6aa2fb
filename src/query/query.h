/*
 * query.h: the query language.  A filter, projection or sort specification
 * is parsed once into a plan (operators looked up in sorted tables) and then
 * evaluated against many documents.
 *
 * Semantics are MongoDB's: dotted paths walk through arrays (a path matches
 * when any element matches, and numeric components index arrays), null
 * matches missing, comparisons use sbl_value_compare() and only compare
 * values of the same canonical type (except $ne/$nin/$not and null rules),
 * $regex uses PCRE2.
 */
#ifndef SBL_QUERY_H
#define SBL_QUERY_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/errors.h"
#include "doc/doc.h"

/* ---- filter ---------------------------------------------------------- */

typedef struct sbl_matcher sbl_matcher_t;

/*
 * Parse a filter document.  Returns NULL and fills err on a malformed filter
 * (BadValue 2 for unknown operators "unknown operator: $foo", and MongoDB's
 * codes for the rest).  The matcher does not keep a reference to filter.
 */
sbl_matcher_t *sbl_matcher_new(const bson_t *filter, sbl_err_t *err);
void sbl_matcher_free(sbl_matcher_t *m);

/*
 * True when doc matches.  When array_pos is not NULL it receives the index
 * of the array element that made the match succeed for the positional $
 * update/projection operator (the first array the path crossed), or -1.
 */
bool sbl_matcher_match(const sbl_matcher_t *m, const bson_t *doc, int32_t *array_pos);

/* Compare strings under coll from now on (NULL: binary, the default); coll must
 * outlive m (cached collations always do).  Call before sharing m between threads. */
void sbl_matcher_set_collation(sbl_matcher_t *m, const sbl_collation_t *coll);

/* True when the filter is empty ({}): every document matches. */
bool sbl_matcher_is_empty(const sbl_matcher_t *m);

/*
 * Top-level operators evaluated outside this module ($expr, $jsonSchema and
 * $where, implemented by src/expr), registered once at start-up so that src/query
 * does not depend on src/expr.  Until registered, the operator is refused
 * with BadValue.  parse returns an owned plan or NULL with err filled; match
 * (given the matcher's collation, NULL: binary) must be safe to call from many
 * threads at once.
 */
typedef struct sbl_match_ext {
    void *(*parse)(const bson_value_t *arg, sbl_err_t *err);
    bool (*match)(const void *plan, const bson_t *doc, const sbl_collation_t *coll);
    void (*free)(void *plan);
} sbl_match_ext_t;
/* op is "$expr", "$jsonSchema" or "$where"; ext must outlive every matcher. */
void sbl_matcher_register_ext(const char *op, const sbl_match_ext_t *ext);
/*
 * An extension's evaluation error (an $expr's division by zero, a failing
 * $toInt): the yes/no interface above has no error path, so match reports it
 * here and answers "no match".  The first error on this thread is kept until
 * taken: scans stop on it and the command fails with it, as mongod's does.
 * sbl_matcher_note_error keeps err unless one is already pending;
 * sbl_matcher_error returns the pending code (0: none) and copies it into err
 * (may be NULL); sbl_matcher_take_error does the same and clears it.
 */
void sbl_matcher_note_error(const sbl_err_t *err);
int sbl_matcher_error(sbl_err_t *err);
int sbl_matcher_take_error(sbl_err_t *err);
/* A command's scope (the dispatcher): op_begin sets a pending error aside in
 * *saved, so the command starts with none; op_end returns the command's (0:
 * none, else copied into err) and puts the saved one back. */
void sbl_matcher_op_begin(sbl_err_t *saved);
int sbl_matcher_op_end(const sbl_err_t *saved, sbl_err_t *err);
/* Where mongod refuses JavaScript in a filter (an aggregation's $match, a
 * validator, a partial index): 2 BadValue "$where is not allowed in this
 * context" when filter has $where at its top level or under $and/$or/$nor. */
int sbl_filter_refuse_where(const bson_t *filter, sbl_err_t *err);

/* ---- _id ranges (how the clustered table is scanned) ------------------- */

/*
 * What the top-level filter says about _id, so the caller can do a point
 * lookup or a bounded range scan of the collection's table instead of a full
 * scan.  Only conjunctions at the top level are considered; anything else
 * leaves the range unbounded (the matcher still filters every document).
 */
typedef struct sbl_id_range {
    enum { SBL_ID_ANY, SBL_ID_POINTS, SBL_ID_RANGE, SBL_ID_NONE } kind;
    /* SBL_ID_POINTS: the exact _id values ($eq or $in), sorted, deduplicated. */
    bson_value_t *points; /* owned; copies */
    size_t npoints;
    /* SBL_ID_RANGE: bounds; has_lo/has_hi false means unbounded. */
    bool has_lo, lo_inclusive, has_hi, hi_inclusive;
    bson_value_t lo, hi; /* owned copies */
} sbl_id_range_t;

/* Analyse filter; never fails (a filter it does not understand gives SBL_ID_ANY). */
void sbl_id_range_from_filter(const bson_t *filter, sbl_id_range_t *r);
/* The same analysis for any field path (index bounds).  first_only keeps only
 * the first constraint found instead of intersecting them (a multikey field,
 * where different array elements may meet different conjuncts). */
void sbl_field_range_from_filter(const bson_t *filter, const char *field, bool first_only,
                                 sbl_id_range_t *r);
void sbl_id_range_destroy(sbl_id_range_t *r);

/* ---- projection ------------------------------------------------------ */

typedef struct sbl_projection sbl_projection_t;

/*
 * Parse a find projection: inclusion or exclusion (not mixed, except _id),
 * dotted paths, $slice, $elemMatch, positional "a.$", $meta, literals, and
 * aggregation expressions ({a: "$b"}, {a: {$add: [...]}}: computed fields,
 * as mongod 4.4+ takes them). Returns NULL with err (code 2 / 31254 / 31253
 * ... as MongoDB) when invalid.  _let: the command's `let` values (constants,
 * sbl_expr_eval_let's), which the expressions may name as $$var; NULL: none.
 */
sbl_projection_t *sbl_projection_new(const bson_t *spec, sbl_err_t *err);
sbl_projection_t *sbl_projection_new_let(const bson_t *spec, const bson_t *let, sbl_err_t *err);
/*
 * A projection's computed fields are expressions, which the expression module
 * parses and evaluates (registered by sbl_expr_init; without it they are
 * refused).  eval evaluates over the whole document root with the let values
 * (NULL: none): *out owned, BSON_TYPE_EOD when missing (the field is left out).
 */
typedef struct sbl_project_ext {
    void *(*parse)(const bson_value_t *spec, sbl_err_t *err);
    int (*eval)(const void *plan, const bson_t *root, const bson_t *let, bson_value_t *out,
                sbl_err_t *err);
    void (*free)(void *plan);
} sbl_project_ext_t;
void sbl_projection_register_ext(const sbl_project_ext_t *ext);
void sbl_projection_free(sbl_projection_t *p);
/*
 * Apply to doc, writing the result into out (initialised by the caller, e.g.
 * bson_init).  array_pos is what sbl_matcher_match reported (for "a.$").
 * Returns 0 or an error code.
 */
/* Copy doc into out without the executor's text score field. */
void sbl_projection_strip_meta(const bson_t *doc, bson_t *out);
/* True when p has a {$meta: "textScore"} field. */
bool sbl_projection_has_meta(const sbl_projection_t *p);
int sbl_projection_apply(const sbl_projection_t *p, const bson_t *doc, int32_t array_pos,
                         bson_t *out, sbl_err_t *err);

/* ---- sort ------------------------------------------------------------ */

typedef struct sbl_sort sbl_sort_t;

/* Parse {field: 1|-1, ...}; {$natural: ±1} means no sort.  Errors: 15975 for a direction
 * other than 1/-1, BadValue (2) for $meta and bad field names. */
sbl_sort_t *sbl_sort_new(const bson_t *spec, sbl_err_t *err);
void sbl_sort_free(sbl_sort_t *s);
/* Three-way compare with MongoDB's sort semantics (arrays sort by their
 * minimum element ascending and maximum descending; missing sorts as null). */
int sbl_sort_compare(const sbl_sort_t *s, const bson_t *a, const bson_t *b);
/* Order strings under coll (NULL: binary, the default); coll must outlive s. */
void sbl_sort_set_collation(sbl_sort_t *s, const sbl_collation_t *coll);
/* True when the sort is exactly {_id: 1} or {_id: -1}; *descending is set. */
/* True when s has a {$meta: "textScore"} key (*onlyp: it is the only key). */
bool sbl_sort_text_score(const sbl_sort_t *s, bool *onlyp);
bool sbl_sort_is_id(const sbl_sort_t *s, bool *descending);


/* ---- text search (fts.c, fts_stop.c) ------------------------------------ */

/* The hidden field the executor appends to each document a $text query
 * returns (its score, a double); {$meta: "textScore"} in projections, sorts
 * and expressions reads it, and nothing else may return it to a client. */
#define SBL_TEXT_SCORE_FIELD "\x7ftextScore"

/* A language's index in the table of text search languages ("english" or
 * "en"; "none": no stemming, no stop words), or -1 when unsupported. */
int sbl_fts_lang(const char *name);
const char *sbl_fts_lang_name(int lang);
/* lang's stop words (sorted, folded) into *wordsp; returns how many. */
size_t sbl_fts_stop_words(int lang, const char *const **wordsp);
size_t sbl_fts_nlanguages(void);
/* True when w (folded, NUL-terminated) is one of lang's stop words. */
bool sbl_fts_stop_word(int lang, const char *w);
/* s folded into out (not NUL-terminated): lower case unless case_sens,
 * without diacritics unless diac_sens (text index version 3). */
void sbl_fts_fold(const char *s, size_t len, bool case_sens, bool diac_sens, sbl_buf_t *out);

/* A set of terms with a score each (the term strings are owned). */
typedef struct sbl_fts_scores {
    char **term;
    double *score;
    size_t n, cap;
} sbl_fts_scores_t;
void sbl_fts_scores_init(sbl_fts_scores_t *s);
void sbl_fts_scores_destroy(sbl_fts_scores_t *s);
/* Add the score of each distinct stemmed term of one string (weight: its field's). */
void sbl_fts_score_string(const char *s, size_t len, int lang, double weight,
                          sbl_fts_scores_t *out);

/* A text index's spec: weighted fields ("$**": every string), languages. */
typedef struct sbl_fts_spec {
    char **fields;
    double *weights;
    size_t nweights;
    bool wildcard;
    double wildcard_weight;
    int default_lang;
    char *lang_override;
} sbl_fts_spec_t;
/* Parse the stored index spec (weights, default_language, language_override). */
sbl_fts_spec_t *sbl_fts_spec_new(const bson_t *spec);
void sbl_fts_spec_free(sbl_fts_spec_t *sp);
/* The terms of doc with their scores (added to out).  Errors: 17261 a
 * non-string language override, 17262 an unsupported language. */
int sbl_fts_doc_scores(const sbl_fts_spec_t *sp, const bson_t *doc, sbl_fts_scores_t *out,
                       sbl_err_t *err);

/* A parsed $search: positive terms (index lookups), negated terms, phrases. */
typedef struct sbl_fts_query {
    int lang;
    bool case_sens, diac_sens;
    sbl_fts_scores_t terms, neg_terms, phrases, neg_phrases;
    sbl_fts_scores_t sens_terms; /* the positive terms under the sensitivity asked */
} sbl_fts_query_t;
sbl_fts_query_t *sbl_fts_query_parse(const char *search, int lang, bool case_sens,
                                     bool diac_sens);
void sbl_fts_query_free(sbl_fts_query_t *q);
/* True when a candidate must be read to check it (negations, phrases, sensitivity). */
bool sbl_fts_query_needs_doc(const sbl_fts_query_t *q);
/* The checks of a candidate doc the index cannot make. */
bool sbl_fts_query_match(const sbl_fts_query_t *q, const sbl_fts_spec_t *sp, const bson_t *doc);

#endif
